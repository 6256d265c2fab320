//! `durable-mcp keys`: the `requestState` key ring in the store, and the key file of
//! encryption at rest.

use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};

use crate::StoreArgs;

/// The `requestState` key ring. Workers create it in the store on first start and share
/// it; whoever can read the store can read it (`serve --state-key` keeps a key outside
/// the store instead, and then the ring is not used).
#[derive(Parser, Debug)]
pub(crate) struct KeysArgs {
    #[command(subcommand)]
    pub(crate) action: KeysAction,
}

#[derive(Subcommand, Debug)]
pub(crate) enum KeysAction {
    /// One line per key: its id, when it was added, from when it seals, until when it
    /// opens (never the secret).
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Add a new key: it seals from `--activate-in-secs` on (every running worker reads
    /// the ring within 10 seconds); the previous keys still open states until
    /// `--keep-old-secs` after that, then they are dropped.
    Rotate {
        #[command(flatten)]
        store: StoreArgs,
        /// Seconds until the new key seals (until then it only opens).
        #[arg(long, default_value_t = durable_mcp::engine::keys::DEFAULT_ACTIVATE_IN.as_secs())]
        activate_in_secs: u64,
        /// Seconds the previous keys still open states once the new key seals: at least
        /// the longest a state lives (10 minutes for durable-mcp's own and the examples').
        /// 0 drops them at once (a leaked key): their states are refused.
        #[arg(long, default_value_t = durable_mcp::engine::keys::DEFAULT_KEEP_OLD.as_secs())]
        keep_old_secs: u64,
    },
    /// The key file of encryption at rest (`--encryption-key-file`): rotate, list, retire.
    /// Unlike the `requestState` ring, it is kept outside the store.
    Encryption {
        #[command(subcommand)]
        action: EncryptionAction,
    },
}

#[derive(Subcommand, Debug)]
pub(crate) enum EncryptionAction {
    /// Add a new random key and make it the primary one (it seals every new value); the
    /// previous keys stay and still open what they sealed. Creates the file if it does
    /// not exist. The file is replaced atomically, readable by its owner only. Workers
    /// read the file at start: restart them (all of them) to seal with the new key.
    Rotate {
        /// The key file.
        #[arg(long)]
        key_file: std::path::PathBuf,
    },
    /// One line per key: its id, when it was created, whether it is primary (never the key).
    /// With `--store`, also how many stored values each key sealed.
    List {
        /// The key file.
        #[arg(long)]
        key_file: std::path::PathBuf,
        /// Count the values of this store by key (a full scan).
        #[arg(long)]
        store: Option<String>,
    },
    /// Remove a key from the file, after a scan of the store shows no value sealed with it
    /// any more (values expire with retention, or are rewritten under the primary key).
    /// Refused while any value uses it, and for the primary key.
    Retire {
        /// The key file.
        #[arg(long)]
        key_file: std::path::PathBuf,
        /// The store whose values are scanned.
        #[arg(long, env = "DURABLE_MCP_STORE", default_value = durable_mcp::DEFAULT_STORE_URL)]
        store: String,
        /// The id of the key to retire.
        id: String,
    },
}

/// `keys encryption`: the key file of encryption at rest.
async fn encryption_keys(action: EncryptionAction) -> anyhow::Result<()> {
    use durable_mcp_store_crypt::{KeyFile, key_usage};
    match action {
        EncryptionAction::Rotate { key_file } => {
            let mut file = KeyFile::read_or_new(&key_file)?;
            let new = file.rotate(durable_mcp::store::now_ms())?;
            file.write(&key_file)?;
            println!(
                "added key {} as primary in {}; {} older key(s) still open their values; restart the workers to seal with it",
                new.id,
                key_file.display(),
                file.keys().len() - 1
            );
            Ok(())
        }
        EncryptionAction::List { key_file, store } => {
            let file = KeyFile::read(&key_file)?;
            let usage = match store {
                Some(url) => Some(key_usage(durable_mcp::open_store(&url).await?.as_ref()).await?),
                None => None,
            };
            for key in file.keys() {
                let values = usage
                    .as_ref()
                    .map_or_else(String::new, |u| format!("  values={}", u.of(&key.id)));
                println!(
                    "{}  created_ms={}{}{}",
                    key.id,
                    key.created_ms,
                    values,
                    if key.primary { "  (primary)" } else { "" }
                );
            }
            if let Some(usage) = usage {
                let unknown: u64 = usage
                    .by_key
                    .iter()
                    .filter(|(id, _)| !file.keys().iter().any(|k| &&k.id == id))
                    .map(|(_, n)| n)
                    .sum();
                println!(
                    "plaintext values: {}; values of keys not in the file: {unknown}",
                    usage.plaintext
                );
            }
            Ok(())
        }
        EncryptionAction::Retire {
            key_file,
            store,
            id,
        } => {
            let mut file = KeyFile::read(&key_file)?;
            if !file.keys().iter().any(|k| k.id == id) {
                anyhow::bail!("no key {id:?} in {}", key_file.display());
            }
            let usage = key_usage(durable_mcp::open_store(&store).await?.as_ref()).await?;
            let used = usage.of(&id);
            if used > 0 {
                anyhow::bail!(
                    "key {id} still seals {used} stored value(s): retire it once they have expired (retention) or were rewritten"
                );
            }
            file.retire(&id)?;
            file.write(&key_file)?;
            println!(
                "retired key {id}: no value of {} uses it",
                crate::config::redact_url(&store)
            );
            Ok(())
        }
    }
}

pub(crate) async fn keys(args: KeysArgs) -> anyhow::Result<()> {
    match args.action {
        KeysAction::Encryption { action } => encryption_keys(action).await,
        KeysAction::List { store } => {
            let opened = store.open().await?;
            let Some((ring, _)) = durable_mcp::engine::keys::read(opened.as_ref()).await? else {
                eprintln!("no key ring yet: the first worker (or `keys rotate`) creates it");
                return Ok(());
            };
            let sealing = ring
                .sealing_key(durable_mcp::store::now_ms())
                .map(|key| key.id.clone());
            for key in ring.keys() {
                println!(
                    "{}  created_ms={}  seals_from_ms={}  opens_until_ms={}{}",
                    key.id,
                    key.created_ms,
                    key.seals_from_ms,
                    key.opens_until_ms
                        .map_or_else(|| "-".to_owned(), |until| until.to_string()),
                    if sealing.as_deref() == Some(key.id.as_str()) {
                        "  (current)"
                    } else {
                        ""
                    }
                );
            }
            Ok(())
        }
        KeysAction::Rotate {
            store,
            activate_in_secs,
            keep_old_secs,
        } => {
            let opened = store.open().await?;
            let ring = durable_mcp::engine::keys::rotate(
                opened.as_ref(),
                Duration::from_secs(activate_in_secs),
                Duration::from_secs(keep_old_secs),
            )
            .await
            .context("rotating the requestState key ring")?;
            let new = ring.keys().last().context("a rotated ring has a key")?;
            println!(
                "added key {}: current for sealing from {} ms since the epoch; {} older key(s) still open states",
                new.id,
                new.seals_from_ms,
                ring.keys().len() - 1
            );
            Ok(())
        }
    }
}
