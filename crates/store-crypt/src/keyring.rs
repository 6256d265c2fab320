//! The key file and the key ring built from it.
//!
//! A key file is JSON, kept outside the store (a stolen disk or backup of the store must
//! not hold the keys that open it):
//!
//! ```json
//! {
//!   "version": 1,
//!   "keys": [
//!     {"id": "k5c2e90d1", "created_ms": 1764620000000, "key": "<32 bytes, standard base64>"},
//!     {"id": "k0b7f3a64", "created_ms": 1764000000000, "key": "..."}
//!   ]
//! }
//! ```
//!
//! The first key is the primary one: every value written is sealed with it. Every key of
//! the file opens the values sealed with it, so after a rotation (a new key put first) the
//! values written before stay readable until they expire or are rewritten; a key is
//! retired (removed from the file) once nothing in the store uses it any more.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ring::aead::{AES_256_GCM, LessSafeKey, UnboundKey};
use ring::rand::{SecureRandom, SystemRandom};
use serde::{Deserialize, Serialize};

use crate::envelope::{self, OpenError, SealError};

/// The version of the key file format this build reads and writes.
pub const KEY_FILE_VERSION: u32 = 1;

/// The longest key id, in bytes.
const MAX_ID_LEN: usize = 32;

/// What went wrong with a key file or a key ring.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// The key file could not be read or written.
    #[error("key file {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The key file's text is not a key file of this version.
    #[error("key file {origin}: {reason}")]
    Invalid {
        /// Where the text came from (a path, an environment variable).
        origin: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The ring has no key at all.
    #[error("key file {0} holds no key (run `durable-mcp keys encryption rotate` to create one)")]
    Empty(String),
    /// The system's random source failed.
    #[error("the system random source failed")]
    Random,
    /// A key to retire is not in the file.
    #[error("no key {0:?} in the key file")]
    NoSuchKey(String),
    /// The primary key cannot be retired: rotate first.
    #[error("key {0:?} is the primary key (it seals every new value): rotate before retiring it")]
    RetirePrimary(String),
}

/// One key as the file holds it.
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StoredKey {
    id: String,
    created_ms: u64,
    key: String,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileForm {
    version: u32,
    keys: Vec<StoredKey>,
}

/// A key's public facts: its id and when it was made (never its bytes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KeyInfo {
    /// Its id, as the envelopes name it.
    pub id: String,
    /// When it was created, milliseconds since the Unix epoch.
    pub created_ms: u64,
    /// Whether it is the primary key (it seals new values).
    pub primary: bool,
}

/// The contents of a key file: the keys, primary first. Its `Debug` shows ids only.
#[derive(Clone, Default)]
pub struct KeyFile {
    keys: Vec<StoredKey>,
}

impl std::fmt::Debug for KeyFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyFile")
            .field(
                "ids",
                &self.keys.iter().map(|k| k.id.as_str()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl KeyFile {
    /// Parse a key file's text; `origin` names it in errors (a path, an environment
    /// variable). Every key is checked: a valid id, unique, 32 bytes.
    pub fn parse(text: &str, origin: &str) -> Result<Self, KeyError> {
        let invalid = |reason: String| KeyError::Invalid {
            origin: origin.to_owned(),
            reason,
        };
        let form: FileForm =
            serde_json::from_str(text).map_err(|e| invalid(format!("not a key file: {e}")))?;
        if form.version != KEY_FILE_VERSION {
            return Err(invalid(format!(
                "version {} (this build reads version {KEY_FILE_VERSION})",
                form.version
            )));
        }
        for (i, key) in form.keys.iter().enumerate() {
            if !valid_id(&key.id) {
                return Err(invalid(format!(
                    "key id {:?}: 1 to {MAX_ID_LEN} of A-Z a-z 0-9 - _",
                    key.id
                )));
            }
            if form.keys[..i].iter().any(|other| other.id == key.id) {
                return Err(invalid(format!("key id {:?} appears twice", key.id)));
            }
            decode_key(&key.key)
                .map_err(|reason| invalid(format!("key {:?}: {reason}", key.id)))?;
        }
        Ok(Self { keys: form.keys })
    }

    /// Read the key file at `path`. On Unix, a file others may read is logged as a warning.
    pub fn read(path: &Path) -> Result<Self, KeyError> {
        let text = std::fs::read_to_string(path).map_err(|source| KeyError::Io {
            path: path.to_owned(),
            source,
        })?;
        warn_if_readable_by_others(path);
        Self::parse(&text, &path.display().to_string())
    }

    /// Read `path`, or an empty file if it does not exist yet (for the first rotation).
    pub fn read_or_new(path: &Path) -> Result<Self, KeyError> {
        match std::fs::metadata(path) {
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(Self::default()),
            _ => Self::read(path),
        }
    }

    /// The file's text (keys included).
    pub fn to_text(&self) -> String {
        let form = FileForm {
            version: KEY_FILE_VERSION,
            keys: self.keys.clone(),
        };
        // Serializing plain strings and integers cannot fail; an empty document would be
        // refused by `parse`, never taken for keys.
        let mut text = serde_json::to_string_pretty(&form).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Write the file to `path` atomically: a temporary file beside it (mode 0600 on Unix),
    /// flushed to disk, then renamed over `path`. A reader sees the old file or the new one.
    pub fn write(&self, path: &Path) -> Result<(), KeyError> {
        let io = |source| KeyError::Io {
            path: path.to_owned(),
            source,
        };
        let dir = path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "keys".into());
        let temp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let _ = std::fs::remove_file(&temp);
        let result = (|| {
            let mut file = options.open(&temp)?;
            file.write_all(self.to_text().as_bytes())?;
            file.sync_all()?;
            std::fs::rename(&temp, path)?;
            // The rename is durable once the directory is synced.
            std::fs::File::open(dir)?.sync_all()
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&temp);
        }
        result.map_err(io)
    }

    /// Make a new random key the primary one and return its facts; the previous keys stay
    /// (they still open what they sealed).
    pub fn rotate(&mut self, now_ms: u64) -> Result<KeyInfo, KeyError> {
        let random = SystemRandom::new();
        let mut bytes = [0u8; 32];
        random.fill(&mut bytes).map_err(|_| KeyError::Random)?;
        let id = loop {
            let mut tag = [0u8; 4];
            random.fill(&mut tag).map_err(|_| KeyError::Random)?;
            let id = format!(
                "k{}",
                tag.iter().map(|b| format!("{b:02x}")).collect::<String>()
            );
            if !self.keys.iter().any(|k| k.id == id) {
                break id;
            }
        };
        self.keys.insert(
            0,
            StoredKey {
                id: id.clone(),
                created_ms: now_ms,
                key: STANDARD.encode(bytes),
            },
        );
        Ok(KeyInfo {
            id,
            created_ms: now_ms,
            primary: true,
        })
    }

    /// Remove the key `id`. The caller checks first that no stored value uses it
    /// ([`crate::key_usage`]); the primary key cannot be retired.
    pub fn retire(&mut self, id: &str) -> Result<(), KeyError> {
        let at = self
            .keys
            .iter()
            .position(|k| k.id == id)
            .ok_or_else(|| KeyError::NoSuchKey(id.to_owned()))?;
        if at == 0 {
            return Err(KeyError::RetirePrimary(id.to_owned()));
        }
        self.keys.remove(at);
        Ok(())
    }

    /// The keys' ids and dates, primary first.
    pub fn keys(&self) -> Vec<KeyInfo> {
        self.keys
            .iter()
            .enumerate()
            .map(|(i, k)| KeyInfo {
                id: k.id.clone(),
                created_ms: k.created_ms,
                primary: i == 0,
            })
            .collect()
    }

    /// The ring that seals with the primary key and opens with every key; `origin` names
    /// the file in the error if it holds no key.
    pub fn ring(&self, origin: &str) -> Result<KeyRing, KeyError> {
        if self.keys.is_empty() {
            return Err(KeyError::Empty(origin.to_owned()));
        }
        let mut keys = Vec::with_capacity(self.keys.len());
        for stored in &self.keys {
            let bytes = decode_key(&stored.key).map_err(|reason| KeyError::Invalid {
                origin: origin.to_owned(),
                reason: format!("key {:?}: {reason}", stored.id),
            })?;
            let unbound = UnboundKey::new(&AES_256_GCM, &bytes).map_err(|_| KeyError::Invalid {
                origin: origin.to_owned(),
                reason: format!("key {:?} refused by AES-256-GCM", stored.id),
            })?;
            keys.push((stored.id.clone(), LessSafeKey::new(unbound)));
        }
        let mut keys = keys.into_iter();
        let primary = keys
            .next()
            .ok_or_else(|| KeyError::Empty(origin.to_owned()))?;
        Ok(KeyRing {
            primary,
            older: keys.collect(),
            random: SystemRandom::new(),
        })
    }
}

fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID_LEN
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn decode_key(text: &str) -> Result<[u8; 32], String> {
    let bytes = STANDARD
        .decode(text.trim())
        .map_err(|_| "not standard base64".to_owned())?;
    <[u8; 32]>::try_from(bytes.as_slice())
        .map_err(|_| format!("{} bytes, AES-256 needs 32", bytes.len()))
}

#[cfg(unix)]
fn warn_if_readable_by_others(path: &Path) {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        tracing::warn!(path = %path.display(), mode = format!("{:o}", meta.permissions().mode() & 0o777), "the encryption key file is readable by other users: chmod 600 it");
    }
}

#[cfg(not(unix))]
fn warn_if_readable_by_others(_path: &Path) {}

/// The keys in use: seals with the primary key, opens with any key of the ring.
/// Its `Debug` shows the key ids only.
pub struct KeyRing {
    primary: (String, LessSafeKey),
    older: Vec<(String, LessSafeKey)>,
    random: SystemRandom,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("ids", &self.ids().collect::<Vec<_>>())
            .finish()
    }
}

impl KeyRing {
    /// The id of the key that seals new values.
    pub fn primary_id(&self) -> &str {
        &self.primary.0
    }

    /// Every key id, primary first.
    pub fn ids(&self) -> impl Iterator<Item = &str> {
        std::iter::once(&self.primary)
            .chain(&self.older)
            .map(|(id, _)| id.as_str())
    }

    /// Seal `plaintext` with the primary key for the place `aad` names.
    pub fn seal(&self, aad: &[u8], plaintext: &str) -> Result<String, SealError> {
        let (id, key) = &self.primary;
        envelope::seal(&self.random, id, key, aad, plaintext)
    }

    /// Open an envelope sealed for the place `aad` names, with the key it names.
    pub fn open(&self, aad: &[u8], value: &str) -> Result<String, OpenError> {
        let (id, bytes) = envelope::parse(value)?;
        let key = std::iter::once(&self.primary)
            .chain(&self.older)
            .find(|(k, _)| k == id)
            .map(|(_, key)| key)
            .ok_or_else(|| OpenError::UnknownKey(id.to_owned()))?;
        envelope::open(id, key, aad, bytes)
    }
}
