//! The harness: the kit's gateway in the test process (`agentbus_testkit::gateway`: a gateway per
//! test, agents with keys, signed envelopes), and what only these tests add: blob content through
//! each target ([`Blobs`]).

use serde_json::{Value, json};

pub use agentbus_testkit::gateway::*;
pub use agentbus_testkit::http_client;

/// Blob uploads and downloads through whichever target a gateway answers with, and gateways whose
/// blob content rests in a chosen [`Target`].
#[allow(async_fn_in_trait)]
pub trait Blobs: Sized {
    /// A gateway whose blob content rests in `target`.
    async fn start_target(target: Target) -> Self;
    /// Registers and uploads `bytes` through whichever target the gateway answers with (§9), as
    /// a sidecar does: the inline PUT, or the sealed pre-signed PUT then `complete`.
    async fn upload(&self, a: &Agent, name: &str, bytes: &[u8]) -> Value;
    /// Puts `bytes` to the upload target of registration `reg` (sealed for a pre-signed one, then
    /// completed): the status and body of the gateway's last answer.
    async fn put_content(&self, a: &Agent, reg: &Value, bytes: &[u8]) -> (u16, Value);
    /// A PUT of `body` to a pre-signed URL; its status.
    async fn put_presigned(&self, url: &str, body: Vec<u8>) -> u16;
    /// `POST /v1/blobs/{id}/complete` for registration `reg`.
    async fn complete(&self, a: &Agent, reg: &Value) -> (u16, Value);
    /// Downloads blob `id` as `a` through the target `GET /v1/blobs/{id}` names: the status and
    /// the plaintext (opened with the blob's key for a pre-signed GET).
    async fn download(&self, a: &Agent, id: &str) -> (u16, Vec<u8>);
    /// Whether this gateway keeps blob content in an S3 bucket.
    fn on_s3(&self) -> bool;
}

impl Blobs for Harness {
    async fn start_target(target: Target) -> Harness {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("gw");
        let mut h = match target {
            Target::Inline => Harness::start_in(dir, None).await,
            Target::S3 | Target::S3ViaGateway => {
                let s3 = crate::s3::bucket(tmp.path()).await;
                Harness::start_with(dir, |c| {
                    s3.configure(c);
                    if target == Target::S3ViaGateway {
                        c.s3_download = agentbus_gateway::config::S3Download::Gateway;
                    }
                })
                .await
            }
        };
        h.hold(tmp);
        h
    }

    async fn upload(&self, a: &Agent, name: &str, bytes: &[u8]) -> Value {
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(bytes));
        let (s, b) = self.post("/v1/blobs", &a.token, json!({"name": name, "media_type": "text/plain", "size": bytes.len(), "sha256": sha})).await;
        assert_eq!(s, 201, "{b}");
        let (s, v) = self.put_content(a, &b, bytes).await;
        assert_eq!(s, 200, "{v}");
        v
    }

    async fn put_content(&self, a: &Agent, reg: &Value, bytes: &[u8]) -> (u16, Value) {
        let up = &reg["upload"];
        let url = up["url"].as_str().unwrap();
        if url.starts_with('/') {
            let resp = self
                .http
                .put(format!("{}{url}", self.url))
                .bearer_auth(&a.token)
                .body(bytes.to_vec())
                .send()
                .await
                .unwrap();
            return (resp.status().as_u16(), resp.json().await.unwrap());
        }
        let sealed = sealing_key(&up["sealing"]).seal(bytes);
        self.put_presigned(url, sealed).await;
        self.complete(a, reg).await
    }

    async fn put_presigned(&self, url: &str, body: Vec<u8>) -> u16 {
        let r = self.http.put(url).body(body).send().await.unwrap();
        r.status().as_u16()
    }

    async fn complete(&self, a: &Agent, reg: &Value) -> (u16, Value) {
        let id = reg["id"].as_str().unwrap();
        self.post(&format!("/v1/blobs/{id}/complete"), &a.token, json!({}))
            .await
    }

    async fn download(&self, a: &Agent, id: &str) -> (u16, Vec<u8>) {
        let (s, meta) = self.get(&format!("/v1/blobs/{id}"), &a.token).await;
        if s != 200 {
            return (s, meta.to_string().into_bytes());
        }
        let url = meta["download"]["url"].as_str().unwrap();
        if url.starts_with('/') {
            let r = self
                .http
                .get(format!("{}{url}", self.url))
                .bearer_auth(&a.token)
                .send()
                .await
                .unwrap();
            return (r.status().as_u16(), r.bytes().await.unwrap().to_vec());
        }
        let r = self.http.get(url).send().await.unwrap();
        let status = r.status().as_u16();
        let sealed = r.bytes().await.unwrap();
        let size = meta["size"].as_u64().unwrap();
        let plain = sealing_key(&meta["download"]["sealing"])
            .open(&sealed, size)
            .expect("the pre-signed download opens under the blob's key");
        (status, plain)
    }

    fn on_s3(&self) -> bool {
        self.app.blobstore().presigns()
    }
}

/// The content key a `sealing` object of the gateway's answers carries.
pub fn sealing_key(sealing: &Value) -> agentbus_protocol::blobseal::ContentKey {
    use base64::Engine as _;
    assert_eq!(sealing["scheme"], agentbus_protocol::blobseal::SCHEME);
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(sealing["key"].as_str().unwrap())
        .unwrap();
    agentbus_protocol::blobseal::ContentKey::from_bytes(raw.try_into().unwrap())
}

/// Where blob content rests in a test: the data directory, or a bucket of the test S3 server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Sealed files under `<data>/blobs`.
    Inline,
    /// A fresh bucket on the moto server, downloads pre-signed.
    S3,
    /// A fresh bucket, downloads through the gateway.
    S3ViaGateway,
}
