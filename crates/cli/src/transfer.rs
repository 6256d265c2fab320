//! `dump`, `load` and `copy`: moving a store's contents between stores, ids preserved.
//!
//! The dump format is JSON lines, versioned by its first line:
//!
//! ```text
//! {"header":{"format":"durable-mcp-dump","version":1,"backend":"sqlite","created_ms":...}}
//! {"session":{...a session record...}}
//! {"record":{"kind":"task","key":"...","value":"...","expires_at_ms":null}}
//! {"stream":{"id":"...","owner":{...},"first_seq":1,"last_seq":3,"closed":true}}
//! {"event":{"stream":"...","seq":1,"data":"..."}}
//! {"end":{"sessions":1,"records":4,"streams":2,"events":9}}
//! ```
//!
//! Sessions come first (loading one creates its standalone stream), then journal records
//! (runs, steps, tasks, state, keys, ...), then each stream followed by its events. Event
//! ids and task ids are kept, so a client resumes with a `Last-Event-ID` it got before the
//! move and a task id still resolves. Record versions are not kept (a loaded record starts
//! at version 1; versions only order writes within one store). The `end` line says what
//! the dump holds: a load that does not reach it reports a truncated dump.
//!
//! Loading (and copying) is idempotent, so an interrupted load or copy is resumed by
//! running it again: sessions and records already present and identical are skipped (a
//! record present with another value is overwritten by the dump's), events a stream
//! already holds are skipped by sequence ([`Store::import_events`]).

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{Context, bail};
use durable_mcp_store::{
    EventId, Expect, RecordKind, SessionRecord, Store, StoreError, StoredEvent, StreamId,
    StreamInfo,
};
use serde::{Deserialize, Serialize};

/// The dump format's name, in its header.
pub const FORMAT: &str = "durable-mcp-dump";
/// The dump format's version.
pub const VERSION: u32 = 1;
/// Streams listed per page, events read per round trip.
const PAGE: usize = 500;
/// Events imported per call.
const IMPORT_CHUNK: usize = 500;

/// One line of a dump.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Line {
    /// The first line: what this is.
    Header {
        format: String,
        version: u32,
        backend: String,
        created_ms: u64,
    },
    /// A live session.
    Session(Box<SessionRecord>),
    /// A journal record.
    Record {
        kind: String,
        key: String,
        value: String,
        expires_at_ms: Option<u64>,
    },
    /// A stream, followed by its events.
    Stream(StreamInfo),
    /// An event of the last stream line's stream.
    Event {
        stream: StreamId,
        seq: u64,
        data: String,
    },
    /// The last line: how many of each the dump holds.
    End(Counts),
}

/// How many items of each kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    /// Sessions.
    pub sessions: u64,
    /// Journal records.
    pub records: u64,
    /// Streams.
    pub streams: u64,
    /// Events.
    pub events: u64,
}

/// A progress bar on stderr when it is a terminal, invisible otherwise.
pub fn progress(message: &'static str) -> indicatif::ProgressBar {
    if std::io::stderr().is_terminal() {
        let bar = indicatif::ProgressBar::new(0);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{msg} [{bar:40}] {pos}/{len} items ({elapsed})",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(message);
        bar
    } else {
        indicatif::ProgressBar::hidden()
    }
}

/// Read every item of `store`, in dump order, handing each line to `out`.
pub async fn export<F, Fut>(
    store: &dyn Store,
    bar: &indicatif::ProgressBar,
    mut out: F,
) -> anyhow::Result<Counts>
where
    F: FnMut(Line) -> Fut,
    Fut: Future<Output = anyhow::Result<()>>,
{
    let mut counts = Counts::default();
    out(Line::Header {
        format: FORMAT.into(),
        version: VERSION,
        backend: store.backend().into(),
        created_ms: durable_mcp_store::now_ms(),
    })
    .await?;
    let sessions = store
        .list_sessions(None, usize::MAX)
        .await
        .context("listing sessions")?;
    bar.inc_length(sessions.len() as u64);
    for session in sessions {
        out(Line::Session(Box::new(session))).await?;
        counts.sessions += 1;
        bar.inc(1);
    }
    for kind in RecordKind::ALL {
        let records = store
            .list_records(kind, "", usize::MAX)
            .await
            .with_context(|| format!("listing {kind} records"))?;
        bar.inc_length(records.len() as u64);
        for record in records {
            out(Line::Record {
                kind: kind.as_str().into(),
                key: record.key,
                value: record.value,
                expires_at_ms: record.expires_at_ms,
            })
            .await?;
            counts.records += 1;
            bar.inc(1);
        }
    }
    let mut after: Option<StreamId> = None;
    loop {
        let page = store
            .list_streams(after.as_ref(), PAGE)
            .await
            .context("listing streams")?;
        let Some(last) = page.last() else { break };
        after = Some(last.id.clone());
        bar.inc_length(page.len() as u64);
        for listed in page {
            // As of now, not as of the listing: a stream of a live store may have grown.
            let info = match store.stream_info(&listed.id).await {
                Ok(info) => info,
                Err(StoreError::NotFound { .. }) => continue,
                Err(error) => return Err(error).context("reading a stream"),
            };
            let (id, last_seq) = (info.id.clone(), info.last_seq);
            out(Line::Stream(info.clone())).await?;
            counts.streams += 1;
            let mut position = info.first_seq.saturating_sub(1);
            while position < last_seq {
                let read = store
                    .read_after(&id, position, PAGE)
                    .await
                    .with_context(|| format!("reading stream {id}"))?;
                if read.events.is_empty() {
                    break;
                }
                for event in read.events {
                    if event.id.seq > last_seq {
                        break;
                    }
                    position = event.id.seq;
                    out(Line::Event {
                        stream: id.clone(),
                        seq: event.id.seq,
                        data: event.data,
                    })
                    .await?;
                    counts.events += 1;
                }
            }
            bar.inc(1);
        }
    }
    out(Line::End(counts)).await?;
    Ok(counts)
}

/// What a load or copy did.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Imported {
    /// Sessions created.
    pub sessions_created: u64,
    /// Sessions already present and identical.
    pub sessions_skipped: u64,
    /// Sessions present with another state (the destination's is kept: it was used since).
    pub sessions_differing: u64,
    /// Records created or overwritten.
    pub records_written: u64,
    /// Records already present and identical.
    pub records_skipped: u64,
    /// Streams seen.
    pub streams: u64,
    /// Events appended.
    pub events_appended: u64,
    /// Events the destination already held.
    pub events_skipped: u64,
    /// What the source said it held (the dump's `end` line), once reached.
    pub source: Option<Counts>,
}

/// Writes the lines of a dump into a store.
pub struct Importer<'a> {
    store: &'a dyn Store,
    stream: Option<StreamInfo>,
    events: Vec<StoredEvent>,
    seen: Counts,
    header: bool,
    /// What was done so far.
    pub done: Imported,
}

impl<'a> Importer<'a> {
    /// An importer into `store`.
    pub fn new(store: &'a dyn Store) -> Self {
        Self {
            store,
            stream: None,
            events: Vec::new(),
            seen: Counts::default(),
            header: false,
            done: Imported::default(),
        }
    }

    /// Apply one line.
    pub async fn apply(&mut self, line: Line) -> anyhow::Result<()> {
        if !matches!(line, Line::Event { .. }) {
            self.finish_stream().await?;
        }
        match line {
            Line::Header {
                format, version, ..
            } => {
                if format != FORMAT || version != VERSION {
                    bail!(
                        "not a dump this durable-mcp reads: format {format:?} version {version} (expected {FORMAT:?} version {VERSION})"
                    );
                }
                self.header = true;
            }
            _ if !self.header => bail!("the dump does not start with its header line"),
            Line::Session(session) => {
                self.seen.sessions += 1;
                match self
                    .store
                    .load_session(&session.principal, &session.id)
                    .await
                {
                    Ok(existing) if existing == *session => self.done.sessions_skipped += 1,
                    Ok(_) => {
                        tracing::warn!(session = %session.id, "the destination holds this session with another state: kept as it is");
                        self.done.sessions_differing += 1;
                    }
                    Err(StoreError::NotFound { .. }) => {
                        let id = session.id.clone();
                        self.store
                            .create_session(*session)
                            .await
                            .with_context(|| format!("loading session {id}"))?;
                        self.done.sessions_created += 1;
                    }
                    Err(error) => {
                        return Err(error).context("reading a session of the destination");
                    }
                }
            }
            Line::Record {
                kind,
                key,
                value,
                expires_at_ms,
            } => {
                self.seen.records += 1;
                let kind = RecordKind::ALL
                    .into_iter()
                    .find(|k| k.as_str() == kind)
                    .with_context(|| format!("unknown record kind {kind:?}"))?;
                let expect = match self.store.get_record(kind, &key).await? {
                    Some(existing)
                        if existing.value == value && existing.expires_at_ms == expires_at_ms =>
                    {
                        self.done.records_skipped += 1;
                        return Ok(());
                    }
                    Some(existing) => Expect::Version(existing.version),
                    None => Expect::Absent,
                };
                self.store
                    .put_record(kind, &key, value, expires_at_ms, expect)
                    .await
                    .with_context(|| format!("loading {kind} record {key}"))?;
                self.done.records_written += 1;
            }
            Line::Stream(info) => {
                self.seen.streams += 1;
                self.done.streams += 1;
                self.stream = Some(info);
            }
            Line::Event { stream, seq, data } => {
                self.seen.events += 1;
                let Some(info) = &self.stream else {
                    bail!("event {stream}_{seq} before any stream line")
                };
                if info.id != stream {
                    bail!("event {stream}_{seq} after the line of stream {}", info.id);
                }
                self.events.push(StoredEvent {
                    id: EventId::new(stream, seq),
                    data,
                });
                // Keep the last event back: it may be the one that closes the stream.
                if self.events.len() > IMPORT_CHUNK {
                    let rest = self.events.split_off(IMPORT_CHUNK);
                    let chunk = std::mem::replace(&mut self.events, rest);
                    self.import(&chunk, false).await?;
                }
            }
            Line::End(counts) => {
                if counts != self.seen {
                    bail!(
                        "the dump says it holds {counts:?} but {:?} were read",
                        self.seen
                    );
                }
                self.done.source = Some(counts);
            }
        }
        Ok(())
    }

    async fn import(&mut self, events: &[StoredEvent], close: bool) -> anyhow::Result<()> {
        let Some(info) = &self.stream else {
            return Ok(());
        };
        let appended = self
            .store
            .import_events(&info.id, &info.owner, events, close)
            .await
            .with_context(|| format!("loading stream {}", info.id))?;
        self.done.events_appended += appended;
        self.done.events_skipped += events.len() as u64 - appended.min(events.len() as u64);
        Ok(())
    }

    async fn finish_stream(&mut self) -> anyhow::Result<()> {
        if self.stream.is_none() {
            return Ok(());
        }
        let events = std::mem::take(&mut self.events);
        let close = self.stream.as_ref().is_some_and(|s| s.closed);
        if !events.is_empty() {
            self.import(&events, close).await?;
        } else if let Some(info) = &self.stream
            && let Err(StoreError::NotFound { .. }) = self.store.stream_info(&info.id).await
        {
            // An empty stream: created, so that its id resolves.
            self.store
                .import_events(&info.id, &info.owner, &[], false)
                .await?;
        }
        self.stream = None;
        Ok(())
    }

    /// The result, or an error if the dump ended before its `end` line.
    pub async fn finish(mut self) -> anyhow::Result<Imported> {
        self.finish_stream().await?;
        if self.done.source.is_none() {
            bail!(
                "the dump ended before its end line (truncated?): what it held so far was loaded; load the whole dump again to finish"
            );
        }
        Ok(self.done)
    }
}

/// `dump`: write every item of `store` to `out`.
pub async fn dump(store: &dyn Store, out: impl Write) -> anyhow::Result<Counts> {
    let bar = progress("dumping");
    let mut out = std::io::BufWriter::new(out);
    let counts = export(store, &bar, |line| {
        let written = serde_json::to_vec(&line)
            .map_err(anyhow::Error::from)
            .and_then(|mut bytes| {
                bytes.push(b'\n');
                Ok(out.write_all(&bytes)?)
            });
        async move { written }
    })
    .await?;
    out.flush()?;
    bar.finish_and_clear();
    Ok(counts)
}

/// `load`: apply the dump read from `input` to `store`.
pub async fn load(store: &dyn Store, input: impl BufRead) -> anyhow::Result<Imported> {
    let bar = progress("loading");
    let mut importer = Importer::new(store);
    for (number, line) in input.lines().enumerate() {
        let line = line.context("reading the dump")?;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Line = serde_json::from_str(&line)
            .with_context(|| format!("line {} of the dump", number + 1))?;
        if !matches!(parsed, Line::Event { .. }) {
            bar.inc(1);
        }
        importer
            .apply(parsed)
            .await
            .with_context(|| format!("line {} of the dump", number + 1))?;
    }
    bar.finish_and_clear();
    importer.finish().await
}

/// `copy`: every item of `from` into `to`.
pub async fn copy(from: &dyn Store, to: &dyn Store) -> anyhow::Result<Imported> {
    let bar = progress("copying");
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Line>(1024);
    let reading = export(from, &bar, move |line| {
        let tx = tx.clone();
        async move {
            tx.send(line)
                .await
                .map_err(|_| anyhow::anyhow!("the copy's writer stopped"))
        }
    });
    let writing = async move {
        let mut importer = Importer::new(to);
        while let Some(line) = rx.recv().await {
            importer.apply(line).await?;
            if importer.done.source.is_some() {
                break;
            }
        }
        anyhow::Ok(importer)
    };
    let (read, written) = tokio::join!(reading, writing);
    let importer = written?;
    read?;
    bar.finish_and_clear();
    importer.finish().await
}

/// A new file for a dump, readable by its owner only (mode 0600 on Unix, whatever the
/// umask): a dump holds the key ring and every session. An existing file is truncated and
/// gets the same mode.
pub fn create_private(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
        options.mode(0o600);
        let file = options.open(path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
        Ok(file)
    }
    #[cfg(not(unix))]
    options.open(path)
}
