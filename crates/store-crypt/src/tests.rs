#![allow(clippy::unwrap_used)] // tests: a panic is the failure report

use std::collections::BTreeMap;

use durable_mcp_store::contract::session;
use durable_mcp_store_memory::MemoryStore;

use super::*;

const SECRET: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"content":[{"type":"text","text":"the launch code is 0000"}]}}"#;

fn file_with(keys: usize) -> KeyFile {
    let mut file = KeyFile::default();
    for n in 0..keys {
        file.rotate(n as u64).unwrap();
    }
    file
}

/// A crypt store over a fresh memory store, and the memory store itself (the raw view).
fn stores(file: &KeyFile) -> (CryptStore, Arc<dyn Store>) {
    let raw: Arc<dyn Store> = Arc::new(MemoryStore::new());
    (
        CryptStore::new(raw.clone(), Arc::new(file.ring("test").unwrap())),
        raw,
    )
}

fn owner() -> StreamOwner {
    StreamOwner {
        principal: Principal::anonymous(),
        session: None,
    }
}

fn corrupt(error: StoreError) -> String {
    assert!(matches!(error, StoreError::Corrupt(_)), "{error:?}");
    error.to_string()
}

#[tokio::test]
async fn every_value_is_stored_sealed_and_read_in_clear() {
    let (crypt, raw) = stores(&file_with(1));
    let stream = StreamId::random();
    crypt.create_stream(&stream, &owner()).await.unwrap();
    crypt.append(&stream, SECRET.into(), false).await.unwrap();
    let batch = WriteBatch::new().append(stream.clone(), "").put_record(
        RecordKind::Step,
        "run/1/step",
        SECRET,
        None,
        Expect::Absent,
    );
    crypt.commit(batch).await.unwrap();
    crypt
        .put_record(
            RecordKind::Run,
            "run/1",
            SECRET.into(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();
    let imported = StreamId::random();
    let events = [StoredEvent {
        id: EventId {
            stream: imported.clone(),
            seq: 1,
        },
        data: SECRET.into(),
    }];
    crypt
        .import_events(&imported, &owner(), &events, true)
        .await
        .unwrap();
    let mut record = session(&Principal::anonymous());
    record.client = serde_json::json!({"clientInfo": {"name": SECRET}});
    record.state = BTreeMap::from([("plan".to_owned(), serde_json::json!(SECRET))]);
    let id = record.id.clone();
    crypt.create_session(record).await.unwrap();
    crypt
        .update_session(
            &Principal::anonymous(),
            &id,
            SessionChange::SetState("more".into(), Some(serde_json::json!(SECRET))),
        )
        .await
        .unwrap();

    // In clear through the wrapper.
    let read = crypt.read_after(&stream, 0, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        [SECRET, ""]
    );
    assert_eq!(
        crypt.read_after(&imported, 0, 10).await.unwrap().events[0].data,
        SECRET
    );
    assert_eq!(
        crypt
            .get_record(RecordKind::Run, "run/1")
            .await
            .unwrap()
            .unwrap()
            .value,
        SECRET
    );
    assert_eq!(
        crypt
            .list_records(RecordKind::Step, "run/1/", 10)
            .await
            .unwrap()[0]
            .value,
        SECRET
    );
    let loaded = crypt
        .load_session(&Principal::anonymous(), &id)
        .await
        .unwrap();
    assert_eq!(loaded.client["clientInfo"]["name"], SECRET);
    assert_eq!(loaded.state["plan"], SECRET);
    assert_eq!(
        crypt.list_sessions(None, 10).await.unwrap()[0].state["more"],
        SECRET
    );

    // Sealed underneath: nothing of the secret, every value an envelope of the primary key.
    let primary = crypt.ring().primary_id().to_owned();
    let mut stored: Vec<String> = raw
        .read_after(&stream, 0, 10)
        .await
        .unwrap()
        .events
        .into_iter()
        .map(|e| e.data)
        .collect();
    stored.extend(
        raw.read_after(&imported, 0, 10)
            .await
            .unwrap()
            .events
            .into_iter()
            .map(|e| e.data),
    );
    stored.push(
        raw.get_record(RecordKind::Run, "run/1")
            .await
            .unwrap()
            .unwrap()
            .value,
    );
    stored.push(
        raw.get_record(RecordKind::Step, "run/1/step")
            .await
            .unwrap()
            .unwrap()
            .value,
    );
    let raw_session = raw
        .load_session(&Principal::anonymous(), &id)
        .await
        .unwrap();
    stored.push(raw_session.client.as_str().unwrap().to_owned());
    stored.extend(
        raw_session
            .state
            .values()
            .map(|v| v.as_str().unwrap().to_owned()),
    );
    assert_eq!(stored.len(), 8);
    for value in &stored {
        assert!(!value.contains("launch code"), "{value}");
        assert_eq!(
            envelope::key_id_of(value),
            Some(primary.as_str()),
            "{value}"
        );
    }
    let usage = key_usage(raw.as_ref()).await.unwrap();
    assert_eq!((usage.of(&primary), usage.plaintext), (8, 0), "{usage:?}");
}

#[tokio::test]
async fn a_tampered_value_is_a_corrupt_error_naming_where() {
    let (crypt, raw) = stores(&file_with(1));
    crypt
        .put_record(
            RecordKind::Task,
            "task/1",
            SECRET.into(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();
    let sealed = raw
        .get_record(RecordKind::Task, "task/1")
        .await
        .unwrap()
        .unwrap();
    let mut chars: Vec<char> = sealed.value.chars().collect();
    // Not the last character: in unpadded base64 it may carry unused bits, and changing
    // those makes the text non-canonical (refused as malformed) instead of the bytes wrong.
    let inner = chars.len() - 2;
    chars[inner] = if chars[inner] == 'A' { 'B' } else { 'A' };
    let tampered: String = chars.into_iter().collect();
    raw.put_record(
        RecordKind::Task,
        "task/1",
        tampered,
        None,
        Expect::Version(sealed.version),
    )
    .await
    .unwrap();
    let error = corrupt(
        crypt
            .get_record(RecordKind::Task, "task/1")
            .await
            .unwrap_err(),
    );
    assert!(
        error.contains("task record \"task/1\"") && error.contains("authentication failed"),
        "{error}"
    );
    let error = corrupt(
        crypt
            .list_records(RecordKind::Task, "", 10)
            .await
            .unwrap_err(),
    );
    assert!(error.contains("authentication failed"), "{error}");

    raw.put_record(
        RecordKind::Task,
        "task/2",
        "enc1:nokey".into(),
        None,
        Expect::Absent,
    )
    .await
    .unwrap();
    let error = corrupt(
        crypt
            .get_record(RecordKind::Task, "task/2")
            .await
            .unwrap_err(),
    );
    assert!(error.contains("malformed envelope"), "{error}");
}

#[tokio::test]
async fn a_value_moved_to_another_place_does_not_open() {
    let (crypt, raw) = stores(&file_with(1));
    // A record copied to another key, and to the same key of another kind.
    crypt
        .put_record(
            RecordKind::Step,
            "run/a/s",
            SECRET.into(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();
    let sealed = raw
        .get_record(RecordKind::Step, "run/a/s")
        .await
        .unwrap()
        .unwrap()
        .value;
    raw.put_record(
        RecordKind::Step,
        "run/b/s",
        sealed.clone(),
        None,
        Expect::Absent,
    )
    .await
    .unwrap();
    raw.put_record(RecordKind::State, "run/a/s", sealed, None, Expect::Absent)
        .await
        .unwrap();
    let error = corrupt(
        crypt
            .get_record(RecordKind::Step, "run/b/s")
            .await
            .unwrap_err(),
    );
    assert!(
        error.contains("step record \"run/b/s\"") && error.contains("moved"),
        "{error}"
    );
    corrupt(
        crypt
            .get_record(RecordKind::State, "run/a/s")
            .await
            .unwrap_err(),
    );
    assert_eq!(
        crypt
            .get_record(RecordKind::Step, "run/a/s")
            .await
            .unwrap()
            .unwrap()
            .value,
        SECRET,
        "the original still opens"
    );

    // An event copied to another stream.
    let (a, b) = (StreamId::random(), StreamId::random());
    crypt.create_stream(&a, &owner()).await.unwrap();
    crypt.create_stream(&b, &owner()).await.unwrap();
    crypt.append(&a, SECRET.into(), false).await.unwrap();
    let event = raw.read_after(&a, 0, 1).await.unwrap().events.remove(0);
    raw.append(&b, event.data, false).await.unwrap();
    let error = corrupt(crypt.read_after(&b, 0, 10).await.unwrap_err());
    assert!(
        error.contains(&format!("an event of stream {b}")),
        "{error}"
    );

    // A state value copied to another session, and to another key of the same session.
    let (one, two) = (
        session(&Principal::anonymous()),
        session(&Principal::anonymous()),
    );
    let (one_id, two_id) = (one.id.clone(), two.id.clone());
    crypt.create_session(one).await.unwrap();
    crypt.create_session(two).await.unwrap();
    let anonymous = Principal::anonymous();
    crypt
        .update_session(
            &anonymous,
            &one_id,
            SessionChange::SetState("k".into(), Some(serde_json::json!(SECRET))),
        )
        .await
        .unwrap();
    let sealed = raw.load_session(&anonymous, &one_id).await.unwrap().state["k"].clone();
    raw.update_session(
        &anonymous,
        &two_id,
        SessionChange::SetState("k".into(), Some(sealed.clone())),
    )
    .await
    .unwrap();
    raw.update_session(
        &anonymous,
        &one_id,
        SessionChange::SetState("other".into(), Some(sealed)),
    )
    .await
    .unwrap();
    let error = corrupt(crypt.load_session(&anonymous, &two_id).await.unwrap_err());
    assert!(
        error.contains(&format!("state key \"k\" of session {two_id}")),
        "{error}"
    );
    corrupt(crypt.load_session(&anonymous, &one_id).await.unwrap_err());
}

#[tokio::test]
async fn after_a_rotation_old_values_open_and_new_ones_use_the_new_key() {
    let mut file = file_with(1);
    let old = file.keys()[0].id.clone();
    let (before, raw) = stores(&file);
    let stream = StreamId::random();
    before.create_stream(&stream, &owner()).await.unwrap();
    before.append(&stream, "old".into(), false).await.unwrap();
    before
        .put_record(
            RecordKind::Alias,
            "a",
            "\"old\"".into(),
            None,
            Expect::Absent,
        )
        .await
        .unwrap();

    let new = file.rotate(10).unwrap().id;
    assert_eq!(
        file.keys()
            .iter()
            .map(|k| (k.id.clone(), k.primary))
            .collect::<Vec<_>>(),
        [(new.clone(), true), (old.clone(), false)]
    );
    let after = CryptStore::new(raw.clone(), Arc::new(file.ring("test").unwrap()));
    after.append(&stream, "new".into(), false).await.unwrap();
    let read = after.read_after(&stream, 0, 10).await.unwrap();
    assert_eq!(
        read.events
            .iter()
            .map(|e| e.data.as_str())
            .collect::<Vec<_>>(),
        ["old", "new"]
    );
    assert_eq!(
        after
            .get_record(RecordKind::Alias, "a")
            .await
            .unwrap()
            .unwrap()
            .value,
        "\"old\""
    );
    let stored = raw.read_after(&stream, 0, 10).await.unwrap().events;
    assert_eq!(envelope::key_id_of(&stored[0].data), Some(old.as_str()));
    assert_eq!(envelope::key_id_of(&stored[1].data), Some(new.as_str()));
    let usage = key_usage(raw.as_ref()).await.unwrap();
    assert_eq!((usage.of(&old), usage.of(&new)), (2, 1), "{usage:?}");

    // The old key retired while values still use it: they are refused by name.
    file.retire(&old).unwrap();
    let retired = CryptStore::new(raw.clone(), Arc::new(file.ring("test").unwrap()));
    let error = corrupt(retired.read_after(&stream, 0, 10).await.unwrap_err());
    assert!(
        error.contains(&format!(
            "sealed with key \"{old}\", which is not in the key ring"
        )),
        "{error}"
    );
    assert!(matches!(file.retire(&new), Err(KeyError::RetirePrimary(_))));
    assert!(matches!(file.retire("nope"), Err(KeyError::NoSuchKey(_))));
}

#[tokio::test]
async fn values_written_before_encryption_still_read_and_new_ones_are_sealed() {
    let raw: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let stream = StreamId::random();
    raw.create_stream(&stream, &owner()).await.unwrap();
    raw.append(&stream, "plain".into(), false).await.unwrap();
    raw.put_record(RecordKind::State, "s", "1".into(), None, Expect::Absent)
        .await
        .unwrap();
    let mut record = session(&Principal::anonymous());
    record.state.insert("n".into(), serde_json::json!(1));
    let id = record.id.clone();
    raw.create_session(record).await.unwrap();

    let crypt = CryptStore::new(raw.clone(), Arc::new(file_with(1).ring("test").unwrap()));
    assert_eq!(
        crypt.read_after(&stream, 0, 10).await.unwrap().events[0].data,
        "plain"
    );
    assert_eq!(
        crypt
            .get_record(RecordKind::State, "s")
            .await
            .unwrap()
            .unwrap()
            .value,
        "1"
    );
    // A compare-and-set against a value stored in clear compares the plaintext, then seals.
    let anonymous = Principal::anonymous();
    let change = SessionChange::CompareAndSetState {
        key: "n".into(),
        expected: Some(serde_json::json!(1)),
        value: Some(serde_json::json!(2)),
    };
    assert_eq!(
        crypt
            .update_session(&anonymous, &id, change)
            .await
            .unwrap()
            .state["n"],
        2
    );
    let stale = SessionChange::CompareAndSetState {
        key: "n".into(),
        expected: Some(serde_json::json!(1)),
        value: Some(serde_json::json!(3)),
    };
    assert!(matches!(
        crypt.update_session(&anonymous, &id, stale).await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(
        raw.load_session(&anonymous, &id).await.unwrap().state["n"]
            .as_str()
            .unwrap()
            .starts_with(envelope::PREFIX)
    );
    crypt.append(&stream, "sealed".into(), false).await.unwrap();
    let usage = key_usage(raw.as_ref()).await.unwrap();
    // Plain: the event, the record and the session's client params; sealed: the new event and state.
    assert_eq!(
        (usage.plaintext, usage.of(crypt.ring().primary_id())),
        (3, 2),
        "{usage:?}"
    );
}

#[tokio::test]
async fn status_names_the_primary_key() {
    let (crypt, _) = stores(&file_with(2));
    let status = crypt.status().await.unwrap();
    let setting = status
        .settings
        .iter()
        .find(|s| s.name == "encryption")
        .unwrap();
    assert!(
        setting.value.contains(crypt.ring().primary_id()) && setting.value.contains("2 key(s)"),
        "{setting:?}"
    );
}

#[test]
fn key_files_round_trip_atomically_with_owner_only_permissions() {
    let dir = std::env::temp_dir().join(format!(
        "durable-mcp-crypt-{}-{}",
        std::process::id(),
        StreamId::random()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys.json");
    assert!(
        KeyFile::read_or_new(&path).unwrap().keys().is_empty(),
        "a missing file starts empty"
    );
    assert!(matches!(
        KeyFile::default().ring("f"),
        Err(KeyError::Empty(_))
    ));
    let file = file_with(2);
    file.write(&path).unwrap();
    let back = KeyFile::read(&path).unwrap();
    assert_eq!(back.keys(), file.keys());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        1,
        "no temporary file left"
    );
    // Ids only in Debug, never the key bytes.
    let text = file.to_text();
    let key = text
        .split("\"key\": \"")
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(key.len(), 44, "32 bytes in base64: {text}");
    for shown in [
        format!("{file:?}"),
        format!("{:?}", file.ring("f").unwrap()),
    ] {
        assert!(
            !shown.contains(&key) && shown.contains(&file.keys()[0].id),
            "{shown}"
        );
    }
}

#[test]
fn a_bad_key_file_is_refused_with_the_reason() {
    let id = "k00000001";
    let key = |bytes: usize| {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(vec![7u8; bytes])
    };
    let cases = [
        ("{}".to_owned(), "not a key file"),
        (r#"{"version": 2, "keys": []}"#.to_owned(), "version 2"),
        (
            format!(
                r#"{{"version": 1, "keys": [{{"id": "{id}", "created_ms": 1, "key": "{}"}}]}}"#,
                key(16)
            ),
            "16 bytes, AES-256 needs 32",
        ),
        (
            format!(
                r#"{{"version": 1, "keys": [{{"id": "a:b", "created_ms": 1, "key": "{}"}}]}}"#,
                key(32)
            ),
            "key id \"a:b\"",
        ),
        (
            format!(
                r#"{{"version": 1, "keys": [{{"id": "{id}", "created_ms": 1, "key": "{0}"}}, {{"id": "{id}", "created_ms": 2, "key": "{0}"}}]}}"#,
                key(32)
            ),
            "appears twice",
        ),
        (
            format!(
                r#"{{"version": 1, "keys": [{{"id": "{id}", "created_ms": 1, "key": "{}", "extra": 1}}]}}"#,
                key(32)
            ),
            "unknown field",
        ),
    ];
    for (text, reason) in cases {
        let error = KeyFile::parse(&text, "ENV").unwrap_err().to_string();
        assert!(
            error.starts_with("key file ENV: ") && error.contains(reason),
            "{text}: {error}"
        );
    }
    let good = format!(
        r#"{{"version": 1, "keys": [{{"id": "{id}", "created_ms": 1, "key": "{}"}}]}}"#,
        key(32)
    );
    assert_eq!(
        KeyFile::parse(&good, "ENV")
            .unwrap()
            .ring("ENV")
            .unwrap()
            .primary_id(),
        id
    );
}
