//! The gateway's HTTP API (`docs/api.md`) as typed calls. Every request carries the bearer token
//! and `agentbus-sidecar-version`, so a gateway that needs a newer client says so (AB-6002).

use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use agentbus_api as api;
use agentbus_protocol::Code;

use crate::error::{ClientError, Result};

/// The header that carries this client's version (§11.4).
pub const SIDECAR_VERSION_HEADER: &str = "agentbus-sidecar-version";

/// A connection to one gateway under one token.
#[derive(Debug, Clone)]
pub struct Gateway {
    base: String,
    token: String,
    http: reqwest::Client,
}

/// What a publish answered.
#[derive(Debug, Clone)]
pub struct Receipt {
    /// The receipt body (`receipt`, `id`, `state`, `trace_id`, and `task_id` for a task request).
    pub body: api::Receipt,
    /// Whether the gateway answered with an idempotent replay of an earlier publish.
    pub replay: bool,
}

/// One leased copy from the inbox.
pub type Delivery = api::Delivery;

/// Reads one `{sequence, delivery, attempt, envelope}` object.
pub fn delivery_from_json(d: &Value) -> Result<Delivery> {
    <Delivery as serde::Deserialize>::deserialize(d)
        .map_err(|_| ClientError::Protocol(format!("a malformed delivery: {d}")))
}

/// A response's body with its status and the gateway's `date` header.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body, `Null` when empty or not JSON.
    pub body: Value,
    /// The `date` header, when sent.
    pub date: Option<String>,
    /// Whether `AgentBus-Idempotent-Replay: true` was set.
    pub replay: bool,
}

/// Installs rustls' `ring` provider, which every reqwest client in the workspace needs before it
/// is built: reqwest is built without a provider so that aws-lc-sys is not pulled in; `ring` is
/// installed process-wide once (a second install is a harmless error).
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

impl Gateway {
    /// A client of the gateway at `base` (e.g. `http://127.0.0.1:7700`) with `token`.
    pub fn new(base: &str, token: &str) -> Result<Gateway> {
        check_url(base)?;
        install_crypto_provider();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| ClientError::Invalid(format!("cannot build the HTTP client: {e}")))?;
        Ok(Gateway {
            base: base.trim_end_matches('/').to_owned(),
            token: token.to_owned(),
            http,
        })
    }

    /// The base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// The token requests carry.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The same gateway under another token.
    pub fn with_token(&self, token: &str) -> Gateway {
        Gateway {
            base: self.base.clone(),
            token: token.to_owned(),
            http: self.http.clone(),
        }
    }

    /// Sends a request and returns whatever the gateway answered, error statuses included.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Body>,
        timeout: Duration,
    ) -> Result<Answer> {
        let url = format!("{}{path}", self.base);
        let mut req = self
            .http
            .request(method, &url)
            .timeout(timeout)
            .header(SIDECAR_VERSION_HEADER, crate::VERSION);
        if !self.token.is_empty() {
            req = req.bearer_auth(&self.token);
        }
        req = with_body(req, body);
        let resp = req.send().await.map_err(|e| ClientError::Unreachable {
            url: url.clone(),
            detail: unreachable_detail(&e),
        })?;
        let status = resp.status();
        let header = |name: &str| {
            resp.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let date = header("date");
        let replay = header("agentbus-idempotent-replay").as_deref() == Some("true");
        let bytes = resp.bytes().await.map_err(|e| ClientError::Unreachable {
            url: url.clone(),
            detail: e.to_string(),
        })?;
        let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        Ok(Answer {
            status,
            body,
            date,
            replay,
        })
    }

    /// Sends a request and turns an error status into [`ClientError::Api`].
    pub async fn request(&self, method: Method, path: &str, body: Option<Body>) -> Result<Answer> {
        self.request_timeout(method, path, body, Duration::from_secs(60))
            .await
    }

    async fn request_timeout(
        &self,
        method: Method,
        path: &str,
        body: Option<Body>,
        timeout: Duration,
    ) -> Result<Answer> {
        let a = self.call(method, path, body, timeout).await?;
        if a.status.is_success() {
            return Ok(a);
        }
        Err(api_error(a.status, &a.body))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.typed(Method::GET, path, None).await
    }

    async fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> Result<T> {
        self.typed(Method::POST, path, Some(Body::json(body)?))
            .await
    }

    /// A request whose answer is read as `T`: an answer of another shape is a protocol error
    /// naming the route.
    async fn typed<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Body>,
    ) -> Result<T> {
        let a = self.request(method.clone(), path, body).await?;
        decode(&method, path, a.body)
    }

    /// `GET /.well-known/agentbus.json` (no token needed).
    pub async fn well_known(&self) -> Result<Answer> {
        self.request(Method::GET, "/.well-known/agentbus.json", None)
            .await
    }

    /// `POST /v1/agents` with a user token: registers `name` with `public_key`.
    pub async fn register_agent(
        &self,
        name: &str,
        public_key: &str,
    ) -> Result<api::RegisteredAgent> {
        let card = api::CardInput {
            name: Some(name.to_owned()),
            public_key: Some(public_key.to_owned()),
            ..api::CardInput::default()
        };
        self.post("/v1/agents", &card).await
    }

    /// `GET /v1/agents/{id}`: a card with its keys.
    pub async fn agent(&self, id: &str) -> Result<api::Card> {
        self.get(&format!("/v1/agents/{}", seg(id)?)).await
    }

    /// `GET /v1/agents`: the directory.
    pub async fn agents(&self) -> Result<Vec<api::Card>> {
        let v: api::Agents = self.get("/v1/agents").await?;
        Ok(v.agents)
    }

    /// `PATCH /v1/agents/{id}`: changes card fields.
    pub async fn patch_agent(&self, id: &str, patch: Value) -> Result<api::Card> {
        self.typed(
            Method::PATCH,
            &format!("/v1/agents/{}", seg(id)?),
            Some(Body::Json(patch)),
        )
        .await
    }

    /// `POST /v1/agents/{id}/keys`: registers a public key.
    pub async fn add_key(&self, id: &str, public_key: &str) -> Result<api::Key> {
        let key = api::NewKey {
            public_key: public_key.to_owned(),
            expires_at: None,
        };
        self.post(&format!("/v1/agents/{}/keys", seg(id)?), &key)
            .await
    }

    /// `POST /v1/agents/{id}/keys/{key}/revoke`.
    pub async fn revoke_key(&self, id: &str, key_id: &str) -> Result<api::RevokedKey> {
        self.post(
            &format!("/v1/agents/{}/keys/{}/revoke", seg(id)?, seg(key_id)?),
            &Map::new(),
        )
        .await
    }

    /// `PUT /v1/topics/{name}/subscription`.
    pub async fn subscribe(&self, topic: &str) -> Result<api::Subscription> {
        self.subscription(Method::PUT, topic).await
    }

    /// `DELETE /v1/topics/{name}/subscription`.
    pub async fn unsubscribe(&self, topic: &str) -> Result<api::Subscription> {
        self.subscription(Method::DELETE, topic).await
    }

    async fn subscription(&self, method: Method, topic: &str) -> Result<api::Subscription> {
        let path = format!("/v1/topics/{}/subscription", seg(topic)?);
        self.typed(method, &path, None).await
    }

    /// `GET /v1/topics`.
    pub async fn topics(&self) -> Result<api::Topics> {
        self.get("/v1/topics").await
    }

    /// `POST /v1/messages`: publishes a signed envelope.
    pub async fn publish(&self, envelope: &Map<String, Value>) -> Result<Receipt> {
        let a = self
            .request(
                Method::POST,
                "/v1/messages",
                Some(Body::Json(Value::Object(envelope.clone()))),
            )
            .await?;
        Ok(Receipt {
            body: decode(&Method::POST, "/v1/messages", a.body)?,
            replay: a.replay,
        })
    }

    /// `GET /v1/inbox?after=&wait=&limit=`: leases deliverable copies, waiting up to `wait_s`.
    pub async fn poll(&self, after: u64, wait_s: u64, limit: u32) -> Result<Vec<Delivery>> {
        let path = format!("/v1/inbox?after={after}&wait={wait_s}&limit={limit}");
        let a = self
            .request_timeout(Method::GET, &path, None, Duration::from_secs(wait_s + 30))
            .await?;
        let list = a.body["deliveries"]
            .as_array()
            .ok_or_else(|| ClientError::Protocol("the inbox answer has no deliveries".into()))?;
        list.iter().map(delivery_from_json).collect()
    }

    /// `POST /v1/inbox/acks`: transport acks, after the copies are persisted locally.
    pub async fn ack(&self, acks: &[(u64, String)]) -> Result<api::ItemResults> {
        let acks = api::Acks {
            acks: acks
                .iter()
                .map(|(sequence, delivery)| api::Ack {
                    sequence: *sequence,
                    delivery: delivery.clone(),
                })
                .collect(),
        };
        self.post("/v1/inbox/acks", &acks).await
    }

    /// `GET /v1/inbox/policy`: the flags of the agent's workspace policy a receiver acts on
    /// (`require_verified_inbound`, `read_receipts`).
    pub async fn inbox_policy(&self) -> Result<api::InboxPolicy> {
        self.get("/v1/inbox/policy").await
    }

    /// `POST /v1/inbox/receipts`: reports messages shown in a session's context, each named by
    /// the inbox sequence and id it was delivered with; per-item results.
    pub async fn report_receipts(
        &self,
        receipts: Vec<api::ShownReceipt>,
    ) -> Result<api::ItemResults> {
        self.post("/v1/inbox/receipts", &api::ShownReceipts { receipts })
            .await
    }

    /// `GET /v1/messages/{id}/delivery`: the delivery states of a message this agent sent, per
    /// recipient (persisted, leased, acknowledged, shown, answered).
    pub async fn delivery(&self, id: &str) -> Result<api::DeliveryStates> {
        self.get(&format!("/v1/messages/{}/delivery", seg(id)?))
            .await
    }

    /// `POST /v1/blobs` then `PUT /v1/blobs/{id}/content`: uploads an attachment and returns its
    /// `data.attachments` entry.
    pub async fn upload_blob(
        &self,
        name: &str,
        media_type: &str,
        bytes: Vec<u8>,
        progress: Option<Progress>,
    ) -> Result<api::Attachment> {
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(&bytes));
        let size = bytes.len() as u64;
        let new = api::NewBlob {
            name: name.to_owned(),
            media_type: Some(media_type.to_owned()),
            size,
            sha256: sha.clone(),
        };
        let created: api::CreatedBlob = self.post("/v1/blobs", &new).await?;
        let id = created.blob.id.as_str();
        let upload = created.upload.url.clone();
        if upload.starts_with("/v1/") {
            let body = match progress {
                Some(p) => Body::Upload(bytes, p),
                None => Body::Bytes(bytes),
            };
            self.request_timeout(Method::PUT, &upload, Some(body), Duration::from_secs(600))
                .await?;
        } else {
            // A pre-signed PUT (§9): the content sealed under the key the gateway handed out, so
            // the store holds no plaintext; it carries no bearer token, and `complete` then has
            // the gateway check what arrived.
            let key = sealing_key(created.upload.sealing.as_ref())?;
            let sealed = key.seal(&bytes);
            drop(bytes);
            // The headers the URL's signature binds, sent exactly; the length is the body's own,
            // so a gateway and client that disagree on the sealed size stop here, not at the store.
            let bound = created.upload.headers.clone().unwrap_or_default();
            let length = sealed.len().to_string();
            if bound
                .get("content-length")
                .is_some_and(|n| n.as_str() != Some(length.as_str()))
            {
                return Err(ClientError::Protocol(format!(
                    "the upload URL of {name:?} is signed for {} bytes; the sealed content is {length}",
                    bound["content-length"]
                )));
            }
            let body = match progress {
                Some(p) => Body::Upload(sealed, p),
                None => Body::Bytes(sealed),
            };
            let mut req = with_body(self.http.put(&upload), Some(body));
            for (k, v) in bound.iter().filter(|(k, _)| *k != "content-length") {
                req = req.header(k.as_str(), v.as_str().unwrap_or_default());
            }
            let req = req.timeout(Duration::from_secs(600));
            let resp = req.send().await.map_err(|e| ClientError::Unreachable {
                url: redact_query(&upload),
                detail: unreachable_detail(&e),
            })?;
            if !resp.status().is_success() {
                return Err(ClientError::Protocol(format!(
                    "the object store refused the upload of {name:?} with {}",
                    resp.status()
                )));
            }
            let _: api::Blob = self
                .post(&format!("/v1/blobs/{}/complete", seg(id)?), &Map::new())
                .await?;
        }
        Ok(api::Attachment {
            reference: created.blob.reference,
            name: name.to_owned(),
            media_type: media_type.to_owned(),
            size,
            sha256: sha,
        })
    }

    /// Downloads blob `id` into `path` through the target `GET /v1/blobs/{id}` names (the
    /// gateway, or a pre-signed GET whose sealed pieces are opened here), by way of
    /// `<path>.part`: an interrupted download resumes from what that file holds (a `Range`
    /// request), and `path` appears only once every byte arrived and the sha256 matches.
    /// Returns the blob's metadata.
    pub async fn download_blob_to(
        &self,
        id: &str,
        path: &std::path::Path,
        progress: Option<Progress>,
    ) -> Result<api::BlobDownload> {
        use agentbus_protocol::blobseal::{CHUNK, Opener, sealed_offset};
        use sha2::Digest as _;
        use std::io::Write as _;
        let meta: api::BlobDownload = self.get(&format!("/v1/blobs/{}", seg(id)?)).await?;
        let size = meta.blob.size;
        let url = meta.download.url.clone();
        let part = path.with_extension(match path.extension() {
            Some(e) => format!("{}.part", e.to_string_lossy()),
            None => "part".into(),
        });
        let mut have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if have > size {
            have = 0;
        }
        let presigned = !url.starts_with("/v1/");
        // A pre-signed download reads whole sealed pieces: resume from the piece holding `have`.
        let first = have / CHUNK as u64;
        if presigned {
            have = first * CHUNK as u64;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(false)
            .open(&part)
            .map_err(crate::error::io(&part))?;
        file.set_len(have).map_err(crate::error::io(&part))?;
        let mut file = std::io::BufWriter::new(file);
        std::io::Seek::seek(&mut file, std::io::SeekFrom::Start(have))
            .map_err(crate::error::io(&part))?;
        if have < size || (size == 0 && presigned) {
            let mut req = if presigned {
                self.http.get(&url)
            } else {
                self.http
                    .get(format!("{}{url}", self.base))
                    .bearer_auth(&self.token)
                    .header(SIDECAR_VERSION_HEADER, crate::VERSION)
            };
            let from = if presigned {
                sealed_offset(first)
            } else {
                have
            };
            if from > 0 {
                req = req.header("range", format!("bytes={from}-"));
            }
            let shown = redact_query(&url);
            let unreachable = |e: reqwest::Error| ClientError::Unreachable {
                url: shown.clone(),
                detail: unreachable_detail(&e),
            };
            let mut resp = req
                .timeout(Duration::from_secs(3600))
                .send()
                .await
                .map_err(unreachable)?;
            let status = resp.status();
            if !status.is_success() {
                let bytes = resp.bytes().await.unwrap_or_default();
                let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                return Err(api_error(status, &body));
            }
            if from > 0 && status != StatusCode::PARTIAL_CONTENT {
                return Err(ClientError::Protocol(format!(
                    "{shown} ignored the range request; delete {} to download from the start",
                    part.display()
                )));
            }
            let mut opener = if presigned {
                Some(Opener::new(
                    sealing_key(meta.download.sealing.as_ref())?,
                    size,
                    first,
                ))
            } else {
                None
            };
            let write = |file: &mut std::io::BufWriter<std::fs::File>, b: &[u8]| {
                if let Some(p) = &progress {
                    p(b.len() as u64);
                }
                file.write_all(b).map_err(crate::error::io(&part))
            };
            while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
                match opener.as_mut() {
                    Some(o) => {
                        let plain = o
                            .push(&chunk)
                            .map_err(|e| ClientError::Protocol(e.to_string()))?;
                        write(&mut file, &plain)?;
                    }
                    None => write(&mut file, &chunk)?,
                }
            }
            if let Some(o) = opener {
                let last = o
                    .finish()
                    .map_err(|e| ClientError::Protocol(e.to_string()))?;
                write(&mut file, &last)?;
            }
        }
        file.flush().map_err(crate::error::io(&part))?;
        drop(file);
        let mut hash = sha2::Sha256::new();
        let mut f = std::fs::File::open(&part).map_err(crate::error::io(&part))?;
        let n = std::io::copy(&mut f, &mut hash).map_err(crate::error::io(&part))?;
        let sha = hex::encode(hash.finalize());
        if n != size || meta.blob.sha256 != sha {
            let _ = std::fs::remove_file(&part);
            return Err(ClientError::Protocol(format!(
                "blob {id} arrived as {n} bytes with sha256 {sha}; it is {size} bytes with {:?}",
                meta.blob.sha256
            )));
        }
        std::fs::rename(&part, path).map_err(crate::error::io(path))?;
        Ok(meta)
    }

    /// `GET /v1/conversations/{id}`.
    pub async fn conversation(&self, id: &str) -> Result<api::Conversation> {
        self.get(&format!("/v1/conversations/{}", seg(id)?)).await
    }

    /// `GET /v1/tasks?limit=`: this agent's tasks, as requester or recipient.
    pub async fn tasks(&self) -> Result<Vec<api::TaskView>> {
        let v: api::Tasks = self.get("/v1/tasks?limit=1000").await?;
        Ok(v.tasks)
    }

    /// `GET /v1/tasks?recipient=&state=`: the tasks in `state` that the agent `agent_id` works
    /// (at most 1000).
    pub async fn tasks_received(&self, agent_id: &str, state: &str) -> Result<Vec<api::TaskView>> {
        let v: api::Tasks = self
            .get(&format!(
                "/v1/tasks?recipient={}&state={}&limit=1000",
                seg(agent_id)?,
                seg(state)?
            ))
            .await?;
        Ok(v.tasks)
    }

    /// `GET /v1/tasks?…`: one page of this agent's tasks matching `query` (pairs of a filter of
    /// the route and its value): the tasks and the `next` cursor.
    pub async fn tasks_page(&self, query: &[(&str, String)]) -> Result<api::Tasks> {
        let mut path = "/v1/tasks".to_owned();
        for (i, (k, v)) in query.iter().enumerate() {
            path.push(if i == 0 { '?' } else { '&' });
            path.push_str(&format!("{k}={}", seg(v)?));
        }
        self.get(&path).await
    }

    /// `GET /v1/messages/sent?limit=&before=`: this agent's sent messages, newest first, with
    /// their delivery states, and the `next` cursor.
    pub async fn sent(&self, limit: u32, before: Option<&str>) -> Result<api::SentMessages> {
        let mut path = format!("/v1/messages/sent?limit={limit}");
        if let Some(b) = before {
            path.push_str(&format!("&before={}", seg(b)?));
        }
        self.get(&path).await
    }

    /// `GET /v1/search?q=&cursor=&limit=`: one page of what this credential may read that
    /// matches `query` (docs/api.md, "Search"), best first, and the `next` cursor.
    pub async fn search(
        &self,
        query: &str,
        cursor: Option<&str>,
        limit: u32,
    ) -> Result<api::SearchResults> {
        let mut path = format!("/v1/search?q={}&limit={limit}", query_value(query));
        if let Some(c) = cursor {
            path.push_str(&format!("&cursor={}", query_value(c)));
        }
        self.get(&path).await
    }

    /// `GET /v1/tasks/{id}`.
    pub async fn task(&self, id: &str) -> Result<api::TaskView> {
        self.get(&format!("/v1/tasks/{}", seg(id)?)).await
    }

    /// `POST /v1/users` (an admin): a user of a workspace the caller administers, with its
    /// integration token (shown once).
    pub async fn create_user(&self, user: &api::NewUser) -> Result<api::CreatedUser> {
        self.post("/v1/users", user).await
    }

    /// `GET /v1/users` (an admin, or the operator): the users the caller administers.
    pub async fn users(&self) -> Result<Vec<api::User>> {
        let v: api::Users = self.get("/v1/users").await?;
        Ok(v.users)
    }

    /// `DELETE /v1/users/{id}`: removes a user with its tokens; answers the user removed.
    pub async fn remove_user(&self, id: &str) -> Result<api::User> {
        self.typed(Method::DELETE, &format!("/v1/users/{}", seg(id)?), None)
            .await
    }

    /// `POST /v1/tokens`: a new integration token for a user the caller administers (itself when
    /// `token.user` is `None`), its secret shown once.
    pub async fn issue_token(&self, token: &api::NewToken) -> Result<api::IssuedToken> {
        self.post("/v1/tokens", token).await
    }

    /// `GET /v1/tokens`: the tokens of the users the caller administers, never their secrets.
    pub async fn tokens(&self) -> Result<Vec<api::TokenInfo>> {
        let v: api::TokenList = self.get("/v1/tokens").await?;
        Ok(v.tokens)
    }

    /// `POST /v1/tokens/{id}/revoke`.
    pub async fn revoke_token(&self, id: &str) -> Result<api::TokenInfo> {
        self.post(&format!("/v1/tokens/{}/revoke", seg(id)?), &Map::new())
            .await
    }
}

/// `req` carrying `body`, with its content type (an upload counted to its progress callback).
fn with_body(mut req: reqwest::RequestBuilder, body: Option<Body>) -> reqwest::RequestBuilder {
    match body {
        Some(Body::Json(v)) => {
            req = req
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&v).unwrap_or_default());
        }
        Some(Body::Bytes(b)) => {
            req = req
                .header("content-type", "application/octet-stream")
                .body(b);
        }
        Some(Body::Upload(bytes, progress)) => {
            // Handed over in 64 KiB chunks, each counted as the HTTP stack takes it.
            let len = bytes.len();
            let chunks: Vec<Vec<u8>> = bytes.chunks(64 * 1024).map(<[u8]>::to_vec).collect();
            let stream = futures_util::stream::iter(chunks.into_iter().map(move |c| {
                progress(c.len() as u64);
                Ok::<_, std::convert::Infallible>(c)
            }));
            req = req
                .header("content-type", "application/octet-stream")
                .header("content-length", len)
                .body(reqwest::Body::wrap_stream(stream));
        }
        None => {}
    }
    req
}

/// An answer's body read as `T`; another shape is a protocol error naming the route.
fn decode<T: DeserializeOwned>(method: &Method, path: &str, body: Value) -> Result<T> {
    serde_json::from_value(body).map_err(|e| {
        let route = path.split('?').next().unwrap_or_default();
        ClientError::Protocol(format!("the gateway's answer to {method} {route}: {e}"))
    })
}

/// The content key of a `sealing` object of the gateway's answers (§9, agentbus-chunked-v1).
fn sealing_key(sealing: Option<&api::Sealing>) -> Result<agentbus_protocol::blobseal::ContentKey> {
    use base64::Engine as _;
    let scheme = sealing.map(|s| s.scheme.as_str());
    let Some(sealing) = sealing.filter(|_| scheme == Some(agentbus_protocol::blobseal::SCHEME))
    else {
        return Err(ClientError::Protocol(format!(
            "the gateway offered a sealing this client does not know: {}",
            scheme.map_or("null".to_owned(), |s| format!("{s:?}"))
        )));
    };
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(&sealing.key)
        .ok()
        .and_then(|k| <[u8; 32]>::try_from(k).ok())
        .map(agentbus_protocol::blobseal::ContentKey::from_bytes)
        .ok_or_else(|| ClientError::Protocol("the blob's content key is not 32 bytes".into()))
}

/// A URL without its query: a pre-signed URL's signature is a credential, never shown.
fn redact_query(url: &str) -> String {
    url.split('?').next().unwrap_or_default().to_owned()
}

/// A request body.
#[derive(Clone)]
pub enum Body {
    /// A JSON document.
    Json(Value),
    /// Raw bytes.
    Bytes(Vec<u8>),
    /// Raw bytes whose transfer is reported to a progress callback.
    Upload(Vec<u8>, Progress),
}

impl Body {
    /// A JSON body of `value`.
    pub fn json(value: &impl Serialize) -> Result<Body> {
        serde_json::to_value(value)
            .map(Body::Json)
            .map_err(|e| ClientError::Invalid(format!("cannot write the request: {e}")))
    }
}

/// Called with the number of bytes just handed to the network.
pub type Progress = std::sync::Arc<dyn Fn(u64) + Send + Sync>;

/// A path segment: ids and names only, so nothing a user types can change the path.
/// `s` as a query-string value: every byte but the unreserved ones percent-encoded, so any text
/// reaches the gateway exactly as written.
fn query_value(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

fn seg(s: &str) -> Result<&str> {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
    {
        Ok(s)
    } else {
        Err(ClientError::Invalid(format!("{s:?} is not an id")))
    }
}

/// The gateway's error body as a [`ClientError::Api`].
pub fn api_error(status: StatusCode, body: &Value) -> ClientError {
    let e = &body["error"];
    let code_str = e["code"].as_str().unwrap_or("").to_owned();
    let message = e["message"]
        .as_str()
        .map(str::to_owned)
        .unwrap_or_else(|| format!("HTTP {status}"));
    ClientError::Api {
        status: status.as_u16(),
        code: code_str.parse::<Code>().ok(),
        code_str: if code_str.is_empty() {
            format!("HTTP {}", status.as_u16())
        } else {
            code_str
        },
        message,
    }
}

/// Checks that `base` is an `http://` or `https://` URL with a host, so that a mistyped
/// `--gateway` is named as such rather than reported as a failed request.
pub fn check_url(base: &str) -> Result<()> {
    let bad = |why: &str| ClientError::GatewayUrl {
        url: base.to_owned(),
        why: why.to_owned(),
    };
    let Some((scheme, _)) = base.split_once("://") else {
        return Err(bad("it has no scheme (http:// or https://)"));
    };
    if scheme != "http" && scheme != "https" {
        return Err(bad("the scheme must be http or https"));
    }
    let url = reqwest::Url::parse(base).map_err(|e| bad(&e.to_string()))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(bad("it names no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("a gateway URL takes no query or fragment"));
    }
    Ok(())
}

/// The detail of an [`ClientError::Unreachable`] whose connection was refused.
pub const CONNECTION_REFUSED: &str = "connection refused";

/// What a failed request's cause was, in the words a person uses: the innermost error of the
/// HTTP stack ("connection refused") rather than its outer "error sending request".
pub fn unreachable_detail(e: &reqwest::Error) -> String {
    let mut inner: &dyn std::error::Error = e;
    while let Some(next) = inner.source() {
        inner = next;
    }
    if let Some(io) = inner.downcast_ref::<std::io::Error>()
        && io.kind() == std::io::ErrorKind::ConnectionRefused
    {
        return CONNECTION_REFUSED.to_owned();
    }
    let text = inner.to_string();
    if e.is_timeout() {
        format!("timed out ({text})")
    } else {
        text
    }
}
