//! Claim-check attachments (§9): registration, the upload targets (the inline PUT, or a
//! pre-signed PUT then `complete`), downloads, the references checked at publish, and expiry.
//!
//! Content rests in the configured [`BlobStore`](crate::blobstore::BlobStore), sealed in chunks
//! under a per-blob content key derived from the tenant data key ([`content_key`],
//! docs/security.md). Objects are named by the gateway-minted id only, never by the declared
//! name, so no name (`../`, absolute paths, NUL, bidi overrides…) can place a byte anywhere else.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde_json::Value;

use agentbus_api as api;
use sha2::{Digest, Sha256};

use agentbus_protocol::Code;
use agentbus_protocol::blobseal::{
    CHUNK, ContentKey, Opener, SCHEME, SealError, TAG, pieces, plain_len, sealed_len, sealed_offset,
};
use agentbus_protocol::envelope::check_attachment_name;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::{AgentRow, BlobRow, Store};

use crate::access;
use crate::blobstore::{ByteStream, PRESIGN_VALID, StoreFailed};
use crate::crypto::DataKey;
use crate::error::{ApiError, ApiResult};
use crate::extract::Body;
use crate::extract::{Json, Path};
use crate::state::{App, Principal};

/// A pending blob's upload window, milliseconds: its pre-signed PUT's validity (§9: 15 minutes).
/// `complete` (and the inline PUT) refuse after it, and the reaper then deletes what was put.
pub const UPLOAD_WINDOW_MS: i64 = PRESIGN_VALID.as_millis() as i64;

impl From<StoreFailed> for ApiError {
    fn from(e: StoreFailed) -> ApiError {
        ApiError::new(Code::StorageUnavailable, e.to_string())
    }
}

/// The content key of blob `b` under its tenant's data key (see [`content_key`]).
async fn blob_key(app: &App, b: &BlobRow) -> ApiResult<ContentKey> {
    Ok(content_key(&app.tenant_key(&b.tenant_id).await?, b))
}

/// The content key of blob `b`: BLAKE3's key derivation over the tenant data key, the blob id
/// and its declared sha256, so each blob has its own key (its chunk nonces are never reused
/// under another blob's) and the gateway stores no key beside the tenant's.
pub fn content_key(tenant: &DataKey, b: &BlobRow) -> ContentKey {
    let mut material = Vec::with_capacity(32 + b.id.len() + b.sha256.len());
    material.extend_from_slice(&tenant.to_bytes());
    material.extend_from_slice(b.id.as_bytes());
    material.extend_from_slice(b.sha256.as_bytes());
    ContentKey::from_bytes(blake3::derive_key(
        "agentbus 2026-12 blob content key v1",
        &material,
    ))
}

/// How the content of `b` is sealed, for a party that seals or opens it itself.
fn sealing(key: &ContentKey, b: &BlobRow) -> api::Sealing {
    api::Sealing {
        scheme: SCHEME.to_owned(),
        key: base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(key.to_bytes()),
        piece_bytes: CHUNK as u64,
        sealed_size: sealed_len(b.size),
    }
}

/// The largest content whose sealed object one upload to this target takes.
fn target_max(app: &App) -> u64 {
    if app.blobstore.presigns() {
        let most = app.blobstore.max_object();
        most - TAG as u64 * pieces(most)
    } else {
        app.config.blob_inline_max
    }
}

async fn blob_body(app: &App, b: &BlobRow) -> ApiResult<api::Blob> {
    let tenant = app
        .store
        .tenant(&b.tenant_id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    Ok(api::Blob {
        id: b.id.clone(),
        reference: format!("blob://{}/{}", tenant.slug, b.id),
        name: b.name.clone(),
        media_type: b.media_type.clone(),
        size: b.size,
        sha256: b.sha256.clone(),
        status: if b.complete { "complete" } else { "pending" }.to_owned(),
        created_at: Timestamp(b.created_at).to_string(),
        expires_at: Timestamp(b.expires_at).to_string(),
    })
}

/// `POST /v1/blobs` `{name, media_type, size, sha256}`: a pending blob and its upload target.
pub async fn create(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<api::CreatedBlob>)> {
    let agent = access::agent(&app, &headers).await?;
    let b: api::NewBlob = crate::extract::parse_json(&body)?;
    let name = b.name.as_str();
    check_attachment_name(name).map_err(|m| ApiError::new(Code::InvalidAttachmentName, m))?;
    let media_type = match b.media_type {
        None => None,
        Some(m) if is_declared_media_type(&m) => Some(m),
        Some(_) => {
            return Err(ApiError::new(
                Code::InvalidRequest,
                "`media_type` is a media type (`type/subtype`, with any parameters), at most 255 \
                 printable ASCII characters",
            ));
        }
    };
    let size = b.size;
    let sha = Some(b.sha256.as_str())
        .filter(|s| s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
    let sha = sha.ok_or_else(|| {
        ApiError::new(Code::InvalidRequest, "`sha256` is 64 lowercase hex digits")
    })?;
    let max = app.config.plan_blob_bytes.min(target_max(&app));
    if size > max {
        return Err(ApiError::new(
            Code::BlobTooLarge,
            format!("{size} bytes declared; at most {max}"),
        ));
    }
    let now = app.now();
    let used = app
        .store
        .blob_bytes(&agent.tenant_id, now, now - UPLOAD_WINDOW_MS)
        .await?;
    if used + size > app.config.tenant_blob_quota {
        return Err(ApiError::new(
            Code::UploadQuota,
            format!(
                "the tenant holds {used} blob bytes; the quota is {}",
                app.config.tenant_blob_quota
            ),
        ));
    }
    let row = BlobRow {
        id: app.mint(IdKind::Blob),
        tenant_id: agent.tenant_id.clone(),
        uploader_id: agent.id.clone(),
        name: name.to_owned(),
        media_type,
        size,
        sha256: sha.to_owned(),
        complete: false,
        created_at: now,
        expires_at: now + app.config.blob_ttl_s * 1000,
    };
    // The target is asked for before the row is stored, so a store that cannot sign leaves no
    // pending blob behind.
    let presigned = app
        .blobstore
        .upload_url(&row.id, sealed_len(size), now)
        .await?;
    app.store.create_blob(row.clone()).await?;
    let blob = blob_body(&app, &row).await?;
    let upload = match presigned {
        Some(up) => {
            let key = blob_key(&app, &row).await?;
            let headers = up
                .headers
                .into_iter()
                .map(|(k, v)| (k, Value::String(v)))
                .collect();
            api::Transfer {
                method: "PUT".to_owned(),
                url: up.url,
                headers: Some(headers),
                expires_at: Some(Timestamp(now + UPLOAD_WINDOW_MS).to_string()),
                sealing: Some(sealing(&key, &row)),
                complete: Some(api::Call {
                    method: "POST".to_owned(),
                    url: format!("/v1/blobs/{}/complete", row.id),
                }),
                max_bytes: None,
            }
        }
        None => api::Transfer {
            method: "PUT".to_owned(),
            url: format!("/v1/blobs/{}/content", row.id),
            headers: None,
            expires_at: None,
            sealing: None,
            complete: None,
            max_bytes: Some(max),
        },
    };
    Ok((StatusCode::CREATED, Json(api::CreatedBlob { blob, upload })))
}

/// The blob `id` if `agent` may use it: it uploaded the blob, or is a party of a message that
/// references it (§9). Any other blob, of its tenant or another, is exactly a blob that does not
/// exist to it (`None`).
async fn usable(app: &App, agent: &AgentRow, id: &str) -> ApiResult<Option<BlobRow>> {
    let Some(b) = app
        .store
        .blob(id)
        .await?
        .filter(|b| b.tenant_id == agent.tenant_id)
    else {
        return Ok(None);
    };
    if b.uploader_id == agent.id || app.store.blob_party(&b.id, &agent.id).await? {
        Ok(Some(b))
    } else {
        Ok(None)
    }
}

async fn readable(app: &App, agent: &AgentRow, id: &str) -> ApiResult<BlobRow> {
    let b = usable(app, agent, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    if b.expires_at <= app.now() {
        return Err(ApiError::new(Code::BlobExpired, "this blob expired"));
    }
    Ok(b)
}

/// The blob `id` if the caller uploaded it; any other answers as a blob that does not exist.
async fn uploading(app: &App, headers: &HeaderMap, id: &str) -> ApiResult<BlobRow> {
    let agent = access::agent(app, headers).await?;
    app.store
        .blob(id)
        .await?
        .filter(|b| b.tenant_id == agent.tenant_id && b.uploader_id == agent.id)
        .ok_or_else(ApiError::not_found)
}

/// `PUT /v1/blobs/{id}/content`: the inline upload, verified against the declared size and hash.
pub async fn upload(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<api::Blob>> {
    let b = uploading(&app, &headers, &id).await?;
    if body.len() as u64 > app.config.blob_inline_max {
        return Err(ApiError::new(
            Code::BlobTooLarge,
            format!(
                "the inline upload cap is {} bytes",
                app.config.blob_inline_max
            ),
        ));
    }
    let digest = hex::encode(Sha256::digest(&body));
    if body.len() as u64 != b.size || digest != b.sha256 {
        return Err(ApiError::new(
            Code::BlobMismatch,
            format!(
                "got {} bytes with sha256 {digest}; declared {} bytes with {}",
                body.len(),
                b.size,
                b.sha256
            ),
        ));
    }
    if !b.complete {
        open_window(&app, &b)?;
        let key = blob_key(&app, &b).await?;
        app.blobstore.put(&b.id, key.seal(&body)).await?;
        mark_complete(&app, &b).await?;
    }
    let b = app.store.blob(&id).await?.ok_or_else(ApiError::not_found)?;
    Ok(Json(blob_body(&app, &b).await?))
}

/// `GET /v1/blobs/{id}`: metadata and the download target.
pub async fn get(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::BlobDownload>> {
    let agent = access::agent(&app, &headers).await?;
    let b = readable(&app, &agent, &id).await?;
    let blob = blob_body(&app, &b).await?;
    let presigned = if b.complete {
        app.blobstore.download_url(&b.id).await?
    } else {
        None
    };
    let download = match presigned {
        Some(url) => {
            let key = blob_key(&app, &b).await?;
            api::Download {
                method: "GET".to_owned(),
                url,
                expires_at: Some(Timestamp(app.now() + UPLOAD_WINDOW_MS).to_string()),
                sealing: Some(sealing(&key, &b)),
            }
        }
        None => api::Download {
            method: "GET".to_owned(),
            url: format!("/v1/blobs/{}/content", b.id),
            expires_at: None,
            sealing: None,
        },
    };
    Ok(Json(api::BlobDownload { blob, download }))
}

/// Refuses a pending blob whose upload window closed (AB-3055).
fn open_window(app: &App, b: &BlobRow) -> ApiResult<()> {
    if app.now() >= b.created_at + UPLOAD_WINDOW_MS {
        return Err(ApiError::new(
            Code::UploadWindowClosed,
            format!(
                "the upload window of {} closed at {}",
                b.id,
                Timestamp(b.created_at + UPLOAD_WINDOW_MS)
            ),
        ));
    }
    Ok(())
}

/// Marks `b` complete; a blob the reaper purged meanwhile (its window closed) is AB-3055.
async fn mark_complete(app: &App, b: &BlobRow) -> ApiResult<()> {
    match app.store.complete_blob(&b.id).await {
        Err(agentbus_store::StoreError::NotFound) => Err(ApiError::new(
            Code::UploadWindowClosed,
            format!("the upload window of {} closed", b.id),
        )),
        other => Ok(other?),
    }
}

/// `POST /v1/blobs/{id}/complete`: reads the uploaded object back, opens it under the blob's
/// content key and checks its size and sha256 before the blob becomes `complete` (§9). Wrong
/// content is deleted and refused; the blob stays pending until its window closes.
pub async fn complete(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<api::Blob>> {
    let b = uploading(&app, &headers, &id).await?;
    if !b.complete {
        open_window(&app, &b)?;
        let Some(obj) = app.blobstore.get(&b.id, 0).await? else {
            return Err(ApiError::new(
                Code::ContentNotUploaded,
                format!("no content was uploaded for {} yet", b.id),
            ));
        };
        let key = blob_key(&app, &b).await?;
        if let Err(e) = verify(key, &b, obj).await {
            app.blobstore.delete(&b.id).await?;
            return Err(e);
        }
        mark_complete(&app, &b).await?;
    }
    let b = app.store.blob(&id).await?.ok_or_else(ApiError::not_found)?;
    Ok(Json(blob_body(&app, &b).await?))
}

/// Opens the whole object and compares the plaintext with the declared size and sha256.
async fn verify(key: ContentKey, b: &BlobRow, obj: crate::blobstore::Object) -> ApiResult<()> {
    // An object of another length may still be other content, well sealed: open it as the size
    // its length gives, so that is told as a mismatch (AB-3020), not as unsealed bytes.
    let Some(sealed_size) = plain_len(obj.len) else {
        return Err(ApiError::new(
            Code::ContentNotSealed,
            format!(
                "the uploaded object is {} bytes, not a sealed length; {} bytes sealed make {}",
                obj.len,
                b.size,
                sealed_len(b.size)
            ),
        ));
    };
    let mut plain = std::pin::pin!(open_stream(key, sealed_size, 0, obj.bytes));
    let mut hash = Sha256::new();
    let mut size = 0u64;
    while let Some(piece) = plain.next().await {
        match piece {
            Ok(p) => {
                size += p.len() as u64;
                hash.update(&p);
            }
            Err(Opening::Seal(e)) => {
                return Err(ApiError::new(Code::ContentNotSealed, e.to_string()));
            }
            Err(Opening::Io(e)) => {
                return Err(ApiError::new(Code::StorageUnavailable, e.to_string()));
            }
        }
    }
    let digest = hex::encode(hash.finalize());
    if size != b.size || digest != b.sha256 {
        return Err(ApiError::new(
            Code::BlobMismatch,
            format!(
                "got {size} bytes with sha256 {digest}; declared {} bytes with {}",
                b.size, b.sha256
            ),
        ));
    }
    Ok(())
}

/// Why opening a stored object failed.
enum Opening {
    Seal(SealError),
    Io(std::io::Error),
}

/// The plaintext of sealed content of `size` bytes, `src` starting at piece `first`.
fn open_stream(
    key: ContentKey,
    size: u64,
    first: u64,
    src: ByteStream,
) -> impl Stream<Item = Result<Bytes, Opening>> + Send {
    let state = (src, Some(Opener::new(key, size, first)));
    futures_util::stream::unfold(state, |(mut src, mut opener)| async move {
        loop {
            let op = opener.as_mut()?;
            let item = match src.next().await {
                Some(Ok(b)) => match op.push(&b) {
                    Ok(p) if p.is_empty() => continue,
                    Ok(p) => Ok(Bytes::from(p)),
                    Err(e) => {
                        opener = None;
                        Err(Opening::Seal(e))
                    }
                },
                Some(Err(e)) => {
                    opener = None;
                    Err(Opening::Io(e))
                }
                None => match opener.take()?.finish() {
                    Ok(p) => Ok(Bytes::from(p)),
                    Err(e) => Err(Opening::Seal(e)),
                },
            };
            return Some((item, (src, opener)));
        }
    })
}

/// The plaintext of complete blob `b` from byte `from` on. Files sealed whole under the tenant key
/// (before content keys) are told apart by their length and opened in memory.
async fn plaintext(
    app: &App,
    b: &BlobRow,
    from: u64,
) -> ApiResult<impl Stream<Item = std::io::Result<Bytes>> + Send + use<>> {
    let tenant = app.tenant_key(&b.tenant_id).await?;
    let missing = || ApiError::new(Code::StorageUnavailable, "the blob's content is missing");
    let first = from / CHUNK as u64;
    let obj = app
        .blobstore
        .get(&b.id, sealed_offset(first))
        .await?
        .ok_or_else(missing)?;
    if obj.len != sealed_len(b.size) {
        let whole = crate::blobstore::collect(
            app.blobstore
                .get(&b.id, 0)
                .await?
                .ok_or_else(missing)?
                .bytes,
        )
        .await
        .map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?;
        let plain = tenant
            .open(&whole)
            .filter(|p| p.len() as u64 == b.size)
            .ok_or_else(|| ApiError::new(Code::StorageUnavailable, "blob content does not open"))?;
        let rest = Bytes::from(plain).slice(
            usize::try_from(from)
                .unwrap_or(usize::MAX)
                .min(b.size as usize)..,
        );
        return Ok(futures_util::stream::iter([Ok(rest)]).left_stream());
    }
    let mut skip = (from - first * CHUNK as u64) as usize;
    let s = open_stream(content_key(&tenant, b), b.size, first, obj.bytes).map(move |r| {
        let mut p = r.map_err(|e| match e {
            Opening::Seal(e) => std::io::Error::other(e),
            Opening::Io(e) => e,
        })?;
        let cut = skip.min(p.len());
        skip -= cut;
        Ok(p.split_off(cut))
    });
    Ok(s.right_stream())
}

/// The blob `id` and its bytes, for an agent that may use it (its uploader, a party of a message
/// referencing it) or an admin whose scope covers the workspace of such an agent; any other blob
/// answers as one that does not exist. Expired is AB-4009, not uploaded yet AB-4021.
pub async fn content_for(app: &App, who: &Principal, id: &str) -> ApiResult<(BlobRow, Vec<u8>)> {
    let b = downloadable(app, who, id).await?;
    let mut stream = std::pin::pin!(plaintext(app, &b, 0).await?);
    let mut plain = Vec::with_capacity(usize::try_from(b.size).unwrap_or(0));
    while let Some(p) = stream.next().await {
        plain.extend_from_slice(
            &p.map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?,
        );
    }
    Ok((b, plain))
}

/// The blob `id` if `who` may download it now (the rules of [`content_for`]).
async fn downloadable(app: &App, who: &Principal, id: &str) -> ApiResult<BlobRow> {
    let b = match who {
        Principal::Agent(agent) => readable(app, agent, id).await?,
        Principal::User(_) => {
            crate::roles::admin(who.clone())?;
            let b = app
                .store
                .blob(id)
                .await?
                .filter(|b| b.tenant_id == who.tenant_id())
                .ok_or_else(ApiError::not_found)?;
            let covered = app
                .store
                .blob_workspaces(&b.id)
                .await?
                .iter()
                .any(|w| crate::roles::administers(who, &b.tenant_id, w));
            if !covered {
                return Err(ApiError::not_found());
            }
            if b.expires_at <= app.now() {
                return Err(ApiError::new(Code::BlobExpired, "this blob expired"));
            }
            b
        }
    };
    if !b.complete {
        return Err(ApiError::new(
            Code::AttachmentPending,
            "this blob's content was not uploaded yet",
        ));
    }
    Ok(b)
}

/// A blob's bytes as a download: `Content-Disposition: attachment` with its name, `nosniff`, and
/// a sandboxing CSP, so a browser saves it and never renders it in the gateway's origin, whatever
/// its declared type. The declared media type is kept only when it is a plain `type/subtype`.
pub fn attachment(b: &BlobRow, bytes: Vec<u8>) -> Response {
    let mut resp = bytes.into_response();
    attachment_headers(&mut resp, b);
    resp
}

fn attachment_headers(resp: &mut Response, b: &BlobRow) {
    let media = b
        .media_type
        .as_deref()
        .filter(|m| is_media_type(m))
        .unwrap_or("application/octet-stream");
    let h = resp.headers_mut();
    for (name, value) in [
        (header::CONTENT_TYPE, media.to_owned()),
        (header::CONTENT_DISPOSITION, disposition(&b.name)),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff".to_owned()),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; sandbox".to_owned(),
        ),
        (header::CACHE_CONTROL, "private, no-store".to_owned()),
    ] {
        if let Ok(v) = header::HeaderValue::from_str(&value) {
            h.insert(name, v);
        }
    }
}

/// What `POST /v1/blobs` takes as a declared media type: `type/subtype` with any parameters, in
/// at most 255 printable ASCII characters. Served as `Content-Type` only when [`is_media_type`].
fn is_declared_media_type(m: &str) -> bool {
    let bare = m.split(';').next().unwrap_or_default().trim();
    m.len() <= 255 && m.bytes().all(|c| (0x20..0x7f).contains(&c)) && is_media_type(bare)
}

fn is_media_type(m: &str) -> bool {
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&c))
    };
    m.len() <= 127 && m.split_once('/').is_some_and(|(t, s)| token(t) && token(s))
}

/// `attachment; filename="<ASCII stand-in>"; filename*=UTF-8''<percent-encoded name>` (RFC 6266):
/// the quoted form keeps only characters that need no escaping, the encoded form is exact.
fn disposition(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::new();
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(char::from(b));
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

/// `GET /v1/blobs/{id}/content`: the bytes, as an attachment, streamed as they are opened. A
/// `Range: bytes=N-` or `bytes=N-M` header gets that part (206), so a client resumes a download
/// where it stopped; any other range form gets the whole (RFC 9110 lets a server ignore it).
pub async fn download(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let result: ApiResult<Response> = async {
        let agent = access::agent(&app, &headers).await?;
        let b = downloadable(&app, &Principal::Agent(agent), &id).await?;
        let range = headers
            .get(header::RANGE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| byte_range(v, b.size));
        let (start, end) = range.unwrap_or((0, b.size));
        let body = plaintext(&app, &b, start).await?;
        let mut left = end - start;
        let body = body.map(move |r| {
            r.map(|mut p| {
                let keep = (left.min(p.len() as u64)) as usize;
                left -= keep as u64;
                p.truncate(keep);
                p
            })
        });
        let mut resp = axum::body::Body::from_stream(body).into_response();
        attachment_headers(&mut resp, &b);
        let h = resp.headers_mut();
        h.insert(
            header::ACCEPT_RANGES,
            header::HeaderValue::from_static("bytes"),
        );
        h.insert(
            header::CONTENT_LENGTH,
            header::HeaderValue::from(end - start),
        );
        if range.is_some() {
            *resp.status_mut() = StatusCode::PARTIAL_CONTENT;
            if let Ok(v) = header::HeaderValue::from_str(&format!(
                "bytes {start}-{}/{}",
                end.saturating_sub(1),
                b.size
            )) {
                resp.headers_mut().insert(header::CONTENT_RANGE, v);
            }
        }
        Ok(resp)
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// `bytes=N-` or `bytes=N-M` inside content of `size` bytes, as `[start, end)`; `None` for any
/// other form or a range outside the content.
fn byte_range(v: &str, size: u64) -> Option<(u64, u64)> {
    let (a, b) = v.trim().strip_prefix("bytes=")?.split_once('-')?;
    let start: u64 = a.trim().parse().ok()?;
    let end = match b.trim() {
        "" => size,
        m => m.parse::<u64>().ok()?.checked_add(1)?.min(size),
    };
    (start < end).then_some((start, end))
}

/// Deletes the content of blobs past their time (§9): complete ones at `AGENTBUS_BLOB_TTL`,
/// pending ones when their upload window closes. A blob is marked purged before its object is
/// deleted, so a `complete` racing the reaper fails rather than completing a blob without
/// content; an object whose deletion fails is logged (a bucket lifecycle rule can catch it).
pub async fn reap(app: &App) -> ApiResult<()> {
    const BATCH: usize = 200;
    let now = app.now();
    let since = now - UPLOAD_WINDOW_MS;
    loop {
        let due = app.store.due_blobs(now, since, BATCH).await?;
        for b in &due {
            if app.store.purge_blob(&b.id, now, since).await?
                && let Err(e) = app.blobstore.delete(&b.id).await
            {
                tracing::warn!(blob = %b.id, error = %e, "expired blob content not deleted");
            }
        }
        if due.len() < BATCH {
            return Ok(());
        }
    }
}

/// Checks every `data.attachments[].ref` and returns the referenced blob ids (§9). A `ref` naming
/// another tenant (`blob://<slug>/…` with a slug not the sender's) is AB-4022, decided from the
/// text alone; a blob the sender may not use, of its own tenant or another, answers AB-4008
/// exactly like one that does not exist; then pending is AB-4021, expired AB-4009, and a size or
/// hash differing from the blob AB-3021.
pub async fn check_attachments(
    app: &App,
    sender: &AgentRow,
    data: Option<&Value>,
) -> ApiResult<Vec<String>> {
    let Some(items) = data
        .and_then(|d| d.get("attachments"))
        .and_then(Value::as_array)
    else {
        return Ok(Vec::new());
    };
    let tenant = app
        .tenant_row(&sender.tenant_id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    let mut ids = Vec::new();
    for (i, a) in items.iter().enumerate() {
        let r = a.get("ref").and_then(Value::as_str).unwrap_or_default();
        let (slug, id) = r
            .strip_prefix("blob://")
            .and_then(|rest| rest.split_once('/'))
            .unwrap_or_default();
        if slug != tenant.slug {
            return Err(ApiError::new(
                Code::AttachmentForbidden,
                format!(
                    "attachment {i}: {r} names another tenant; attach blobs of your own (blob://{}/…)",
                    tenant.slug
                ),
            ));
        }
        let blob = usable(app, sender, id).await?.ok_or_else(|| {
            ApiError::new(
                Code::UnknownAttachment,
                format!("attachment {i}: no blob {r}"),
            )
        })?;
        if !blob.complete {
            return Err(ApiError::new(
                Code::AttachmentPending,
                format!("attachment {i}: {r} is still pending upload"),
            ));
        }
        if blob.expires_at <= app.now() {
            return Err(ApiError::new(
                Code::BlobExpired,
                format!("attachment {i}: {r} expired"),
            ));
        }
        let size = a.get("size").and_then(Value::as_u64);
        let sha = a.get("sha256").and_then(Value::as_str);
        if size != Some(blob.size) || sha != Some(blob.sha256.as_str()) {
            return Err(ApiError::new(
                Code::AttachmentMismatch,
                format!("attachment {i}: size or sha256 differ from blob {r}"),
            ));
        }
        ids.push(blob.id);
    }
    Ok(ids)
}
