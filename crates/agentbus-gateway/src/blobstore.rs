//! Where blob content rests (§9): one interface, two targets. [`BlobStore::Files`] keeps sealed
//! objects under `<data>/blobs`; [`BlobStore::S3`] keeps them in an S3-compatible bucket and hands
//! out pre-signed URLs. The blob routes (`blobs`) never ask which one is configured: they put,
//! read, delete and ask for targets, and a target that does not exist is `None`.
//!
//! Objects are named by the gateway-minted blob id only (never a declared name), and hold the
//! content sealed as `agentbus_protocol::blobseal` describes, so neither a disk nor a bucket ever
//! holds plaintext (docs/security.md).

use std::io::SeekFrom;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{Stream, StreamExt, TryStreamExt};
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::signer::Signer;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutPayload,
    RetryConfig,
};
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use agentbus_store::Store as _;

use crate::config::{Config, S3Download};

/// How long a pre-signed URL is valid, and a pending blob's upload window (§9: 15 minutes).
pub const PRESIGN_VALID: Duration = Duration::from_secs(15 * 60);

/// The largest object one S3 PUT takes (5 GiB), so the largest sealed blob the S3 target accepts.
pub const S3_PUT_MAX: u64 = 5 << 30;

/// Bytes of an object as they arrive.
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// An object read from `offset` on: its whole length and the bytes from there.
pub struct Object {
    /// The object's length, from its start.
    pub len: u64,
    /// Its bytes from the offset asked for.
    pub bytes: ByteStream,
}

/// Why the object store failed: a cause for logs and error bodies.
#[derive(Debug, thiserror::Error)]
#[error("blob store: {0}")]
pub struct StoreFailed(pub String);

/// The configured target of blob content.
#[derive(Clone)]
pub enum BlobStore {
    /// Sealed files under a directory of the gateway's data.
    Files(PathBuf),
    /// Sealed content in the database (PostgreSQL without an object store), where every replica
    /// reads what any of them wrote.
    Database(agentbus_store::AnyStore),
    /// An S3-compatible bucket.
    S3(Arc<S3Target>),
}

/// The S3 target: the client, the key prefix, how downloads go, and what upload URLs are
/// signed under.
pub struct S3Target {
    store: AmazonS3,
    prefix: String,
    download: S3Download,
    access_key_id: String,
    secret_access_key: String,
    region: String,
}

/// A pre-signed upload: the URL, and the headers its signature binds, which the uploader must
/// send exactly (the store refuses the PUT otherwise).
#[derive(Debug, Clone)]
pub struct Upload {
    /// The pre-signed PUT.
    pub url: String,
    /// Header names (lower case) and values bound to the signature.
    pub headers: Vec<(String, String)>,
}

/// A start-up refusal of the S3 settings: its cause and its fix, each a line.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{cause}")]
pub struct S3Unusable {
    /// What is wrong.
    pub cause: String,
    /// What to do.
    pub fix: String,
}

fn unusable(cause: impl Into<String>, fix: impl Into<String>) -> S3Unusable {
    S3Unusable {
        cause: cause.into(),
        fix: fix.into(),
    }
}

impl BlobStore {
    /// The target `config` names: S3 when `s3_endpoint` is set, checked by putting and deleting a
    /// probe object; otherwise files under `<data>/blobs` beside SQLite, or the database itself
    /// when that is PostgreSQL (replicas share it; files under one replica's data they would not).
    pub async fn open(
        config: &Config,
        store: &agentbus_store::AnyStore,
    ) -> Result<BlobStore, S3Unusable> {
        if config.s3_endpoint.is_empty() {
            return Ok(if store.keeps_blob_content() {
                BlobStore::Database(store.clone())
            } else {
                BlobStore::Files(config.data_dir.join("blobs"))
            });
        }
        for (value, name) in [
            (&config.s3_bucket, "s3_bucket (AGENTBUS_S3_BUCKET)"),
            (
                &config.s3_access_key_id,
                "s3_access_key_id (AGENTBUS_S3_ACCESS_KEY_ID)",
            ),
            (
                &config.s3_secret_access_key_file,
                "s3_secret_access_key_file (AGENTBUS_S3_SECRET_ACCESS_KEY_FILE)",
            ),
        ] {
            if value.is_empty() {
                return Err(unusable(
                    format!("s3_endpoint is set but {name} is not"),
                    format!("set {name}, or unset s3_endpoint to keep blobs in the data directory"),
                ));
            }
        }
        let secret = std::fs::read_to_string(&config.s3_secret_access_key_file).map_err(|e| {
            unusable(
                format!(
                    "the S3 secret file {} cannot be read: {e}",
                    config.s3_secret_access_key_file
                ),
                "point s3_secret_access_key_file at a readable file holding the secret access key",
            )
        })?;
        let secret = secret.trim();
        if secret.is_empty() {
            return Err(unusable(
                format!(
                    "the S3 secret file {} is empty",
                    config.s3_secret_access_key_file
                ),
                "write the secret access key into it, on one line",
            ));
        }
        // One store call gives up after a few quick retries: a gateway start or a request should
        // report an unreachable store in seconds, not after object_store's default 3 minutes.
        let retry = RetryConfig {
            backoff: BackoffConfig::default(),
            max_retries: 2,
            retry_timeout: Duration::from_secs(10),
        };
        let client = ClientOptions::new()
            .with_allow_http(config.s3_endpoint.starts_with("http://"))
            .with_connect_timeout(Duration::from_secs(5))
            .with_timeout(Duration::from_secs(600));
        // reqwest is built without a rustls provider in this workspace (Cargo.toml): install ring's
        // before object_store builds its client; an https endpoint needs it.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store = AmazonS3Builder::new()
            .with_endpoint(&config.s3_endpoint)
            .with_bucket_name(&config.s3_bucket)
            .with_region(&config.s3_region)
            .with_access_key_id(&config.s3_access_key_id)
            .with_secret_access_key(secret)
            .with_virtual_hosted_style_request(!config.s3_path_style)
            .with_retry(retry)
            .with_client_options(client)
            .build()
            .map_err(|e| {
                unusable(
                    format!("the S3 settings are not usable: {e}"),
                    "check s3_endpoint, s3_bucket and s3_region (docs/settings.md)",
                )
            })?;
        let target = S3Target {
            store,
            prefix: config.s3_prefix.clone(),
            download: config.s3_download,
            access_key_id: config.s3_access_key_id.clone(),
            secret_access_key: secret.to_owned(),
            region: config.s3_region.clone(),
        };
        let probe = target.path(&format!(
            ".probe-{}",
            hex::encode(agentbus_runtime::random_bytes::<8>())
        ));
        let fix = format!(
            "check that {} answers, that bucket {} exists, and that the access key may put and delete objects under {:?}",
            config.s3_endpoint, config.s3_bucket, config.s3_prefix
        );
        target
            .store
            .put(&probe, PutPayload::from_static(b"agentbus probe"))
            .await
            .map_err(|e| {
                unusable(
                    format!(
                        "the S3 bucket {} is not writable: {}",
                        config.s3_bucket,
                        first_line(&e)
                    ),
                    fix.clone(),
                )
            })?;
        target.store.delete(&probe).await.map_err(|e| {
            unusable(
                format!(
                    "the S3 probe object could not be deleted: {}",
                    first_line(&e)
                ),
                fix.clone(),
            )
        })?;
        Ok(BlobStore::S3(Arc::new(target)))
    }

    /// Whether uploads go to pre-signed URLs (then `POST /v1/blobs/{id}/complete` finishes them).
    pub fn presigns(&self) -> bool {
        matches!(self, BlobStore::S3(_))
    }

    /// The largest sealed object this target takes in one upload.
    pub fn max_object(&self) -> u64 {
        match self {
            BlobStore::Files(_) | BlobStore::Database(_) => u64::MAX,
            BlobStore::S3(_) => S3_PUT_MAX,
        }
    }

    /// Writes the sealed object of blob `id`, durably, replacing none other (ids are unique).
    pub async fn put(&self, id: &str, sealed: Vec<u8>) -> Result<(), StoreFailed> {
        match self {
            BlobStore::Files(dir) => {
                let dir = dir.clone();
                let path = dir.join(id);
                tokio::task::spawn_blocking(move || -> std::io::Result<()> {
                    std::fs::create_dir_all(&dir)?;
                    let tmp = path.with_extension("part");
                    std::fs::write(&tmp, sealed)?;
                    std::fs::File::open(&tmp)?.sync_all()?;
                    std::fs::rename(&tmp, &path)
                })
                .await
                .map_err(|e| StoreFailed(e.to_string()))?
                .map_err(|e| StoreFailed(e.to_string()))
            }
            BlobStore::Database(store) => store
                .put_blob_content(id, sealed)
                .await
                .map_err(|e| StoreFailed(e.to_string())),
            BlobStore::S3(t) => t
                .store
                .put(&t.path(id), PutPayload::from(sealed))
                .await
                .map(drop)
                .map_err(|e| StoreFailed(first_line(&e))),
        }
    }

    /// The object of blob `id` from byte `offset` on; `None` when there is none.
    pub async fn get(&self, id: &str, offset: u64) -> Result<Option<Object>, StoreFailed> {
        match self {
            BlobStore::Files(dir) => {
                let mut f = match tokio::fs::File::open(dir.join(id)).await {
                    Ok(f) => f,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                    Err(e) => return Err(StoreFailed(e.to_string())),
                };
                let len = f
                    .metadata()
                    .await
                    .map_err(|e| StoreFailed(e.to_string()))?
                    .len();
                f.seek(SeekFrom::Start(offset.min(len)))
                    .await
                    .map_err(|e| StoreFailed(e.to_string()))?;
                Ok(Some(Object {
                    len,
                    bytes: file_stream(f),
                }))
            }
            BlobStore::Database(store) => {
                let Some(sealed) = store
                    .blob_content(id)
                    .await
                    .map_err(|e| StoreFailed(e.to_string()))?
                else {
                    return Ok(None);
                };
                let len = sealed.len() as u64;
                let rest = Bytes::from(sealed).slice(offset.min(len) as usize..);
                Ok(Some(Object {
                    len,
                    bytes: Box::pin(futures_util::stream::once(async move { Ok(rest) })),
                }))
            }
            BlobStore::S3(t) => {
                let path = t.path(id);
                let len = match t.store.head(&path).await {
                    Ok(meta) => meta.size,
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(StoreFailed(first_line(&e))),
                };
                if offset >= len {
                    return Ok(Some(Object {
                        len,
                        bytes: Box::pin(futures_util::stream::empty()),
                    }));
                }
                let opts = GetOptions::new().with_range(Some(GetRange::Offset(offset)));
                let got = match t.store.get_opts(&path, opts).await {
                    Ok(g) => g,
                    Err(object_store::Error::NotFound { .. }) => return Ok(None),
                    Err(e) => return Err(StoreFailed(first_line(&e))),
                };
                let bytes = got
                    .into_stream()
                    .map_err(|e| std::io::Error::other(first_line(&e)));
                Ok(Some(Object {
                    len,
                    bytes: Box::pin(bytes),
                }))
            }
        }
    }

    /// Deletes the object of blob `id`; one that is not there is already deleted.
    pub async fn delete(&self, id: &str) -> Result<(), StoreFailed> {
        match self {
            BlobStore::Files(dir) => match tokio::fs::remove_file(dir.join(id)).await {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(StoreFailed(e.to_string())),
            },
            // The purge that made it due deleted the content in the same transaction.
            BlobStore::Database(_) => Ok(()),
            BlobStore::S3(t) => match t.store.delete(&t.path(id)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(StoreFailed(first_line(&e))),
            },
        }
    }

    /// A pre-signed PUT of blob `id`'s object, signed at `now_ms` (the gateway's clock) and valid
    /// [`PRESIGN_VALID`], binding `content-length` to `sealed_len` so the store itself refuses
    /// another length; `None` on a target that takes uploads only through the gateway.
    pub async fn upload_url(
        &self,
        id: &str,
        sealed_len: u64,
        now_ms: i64,
    ) -> Result<Option<Upload>, StoreFailed> {
        let BlobStore::S3(t) = self else {
            return Ok(None);
        };
        // object_store names the object (its addressing style and path encoding, the ones its own
        // reads and deletes use); its signature is dropped, as it cannot bind content-length.
        let named = self
            .presign(object_store::signer::Method::PUT, id)
            .await?
            .unwrap_or_default();
        let object = named.split('?').next().unwrap_or_default();
        let length = sealed_len.to_string();
        let url = crate::sigv4::presign(
            "PUT",
            object,
            &[("content-length", &length)],
            &crate::sigv4::date_of(now_ms),
            PRESIGN_VALID.as_secs(),
            &crate::sigv4::Credentials {
                access_key_id: &t.access_key_id,
                secret_access_key: &t.secret_access_key,
                region: &t.region,
            },
        )
        .map_err(|e| StoreFailed(e.to_string()))?;
        Ok(Some(Upload {
            url,
            headers: vec![("content-length".into(), length)],
        }))
    }

    /// A pre-signed GET of blob `id`'s object, valid [`PRESIGN_VALID`]; `None` when downloads go
    /// through the gateway (the files target, or S3 with `s3_download = "gateway"`).
    pub async fn download_url(&self, id: &str) -> Result<Option<String>, StoreFailed> {
        match self {
            BlobStore::S3(t) if t.download == S3Download::Presigned => {
                self.presign(object_store::signer::Method::GET, id).await
            }
            _ => Ok(None),
        }
    }

    async fn presign(
        &self,
        method: object_store::signer::Method,
        id: &str,
    ) -> Result<Option<String>, StoreFailed> {
        match self {
            BlobStore::Files(_) | BlobStore::Database(_) => Ok(None),
            BlobStore::S3(t) => t
                .store
                .signed_url(method, &t.path(id), PRESIGN_VALID)
                .await
                .map(|u| Some(u.to_string()))
                .map_err(|e| StoreFailed(first_line(&e))),
        }
    }
}

impl S3Target {
    /// The object key of `name`: the prefix, then the name (a gateway-minted id).
    fn path(&self, name: &str) -> ObjectPath {
        ObjectPath::from(format!("{}{name}", self.prefix))
    }
}

/// An error's first line, without the credentials or URLs a longer chain might carry.
fn first_line(e: &dyn std::fmt::Display) -> String {
    e.to_string().lines().next().unwrap_or_default().to_owned()
}

/// A file's bytes from its current position, in pieces of at most 1 MiB.
fn file_stream(f: tokio::fs::File) -> ByteStream {
    Box::pin(futures_util::stream::unfold(f, |mut f| async move {
        let mut buf = vec![0u8; 1 << 20];
        match f.read(&mut buf).await {
            Ok(0) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((Ok(Bytes::from(buf)), f))
            }
            Err(e) => Some((Err(e), f)),
        }
    }))
}

/// Reads a whole stream into memory (small objects: a legacy file, an inline-sized blob).
pub async fn collect(mut s: ByteStream) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    while let Some(b) = s.next().await {
        out.extend_from_slice(&b?);
    }
    Ok(out)
}
