//! Claim-check attachments (§9): registration, the inline upload target, downloads, and the
//! references checked at publish.
//!
//! Content lives in `<data>/blobs/<blob id>`, sealed under the tenant data key. The path is made
//! from the gateway-minted id only, never from the declared name, so no name (`../`, absolute
//! paths, NUL, bidi overrides…) can place a byte outside that folder.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use agentbus_protocol::Code;
use agentbus_protocol::envelope::check_attachment_name;
use agentbus_protocol::ids::IdKind;
use agentbus_protocol::timestamp::Timestamp;
use agentbus_store::{AgentRow, BlobRow, Store};

use crate::app::{App, Principal};
use crate::auth;
use crate::error::{ApiError, ApiResult, Body};
use crate::extract::{Json, Path};

fn blob_path<S: Store>(app: &App<S>, id: &str) -> std::path::PathBuf {
    app.config.data_dir.join("blobs").join(id)
}

async fn blob_json<S: Store>(app: &App<S>, b: &BlobRow) -> ApiResult<Value> {
    let tenant = app
        .store
        .tenant(&b.tenant_id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    Ok(json!({
        "id": b.id,
        "ref": format!("blob://{}/{}", tenant.slug, b.id),
        "name": b.name,
        "media_type": b.media_type,
        "size": b.size,
        "sha256": b.sha256,
        "status": if b.complete { "complete" } else { "pending" },
        "created_at": Timestamp(b.created_at).to_string(),
        "expires_at": Timestamp(b.expires_at).to_string(),
    }))
}

/// `POST /v1/blobs` `{name, media_type, size, sha256}`: a pending blob and its upload target.
pub async fn create<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Body(body): Body,
) -> ApiResult<(StatusCode, Json<Value>)> {
    let agent = auth::agent(&app, &headers).await?;
    let b: Value = agentbus_protocol::json::parse(&body)
        .map_err(|e| ApiError::new(Code::MalformedJson, e.to_string()))?;
    let name = b["name"]
        .as_str()
        .ok_or_else(|| ApiError::new(Code::InvalidRequest, "`name` is required"))?;
    check_attachment_name(name).map_err(|m| ApiError::new(Code::InvalidAttachmentName, m))?;
    let size = b["size"]
        .as_u64()
        .ok_or_else(|| ApiError::new(Code::InvalidRequest, "`size` is a non-negative integer"))?;
    let sha = b["sha256"]
        .as_str()
        .filter(|s| s.len() == 64 && s.bytes().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f')));
    let sha = sha.ok_or_else(|| {
        ApiError::new(Code::InvalidRequest, "`sha256` is 64 lowercase hex digits")
    })?;
    let max = app.config.plan_blob_bytes.min(app.config.blob_inline_max);
    if size > max {
        return Err(ApiError::new(
            Code::BlobTooLarge,
            format!("{size} bytes declared; at most {max}"),
        ));
    }
    let now = app.now();
    let used = app.store.blob_bytes(&agent.tenant_id, now).await?;
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
        media_type: b["media_type"].as_str().map(str::to_owned),
        size,
        sha256: sha.to_owned(),
        complete: false,
        created_at: now,
        expires_at: now + app.config.blob_ttl_s * 1000,
    };
    app.store.create_blob(row.clone()).await?;
    let mut out = blob_json(&app, &row).await?;
    out["upload"] =
        json!({"method": "PUT", "url": format!("/v1/blobs/{}/content", row.id), "max_bytes": max});
    Ok((StatusCode::CREATED, Json(out)))
}

/// The blob `id` if `agent` may use it: it uploaded the blob, or is a party of a message that
/// references it (§9). Any other blob, of its tenant or another, is exactly a blob that does not
/// exist to it (`None`).
async fn usable<S: Store>(app: &App<S>, agent: &AgentRow, id: &str) -> ApiResult<Option<BlobRow>> {
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

async fn readable<S: Store>(app: &App<S>, agent: &AgentRow, id: &str) -> ApiResult<BlobRow> {
    let b = usable(app, agent, id)
        .await?
        .ok_or_else(ApiError::not_found)?;
    if b.expires_at <= app.now() {
        return Err(ApiError::new(Code::BlobExpired, "this blob expired"));
    }
    Ok(b)
}

/// `PUT /v1/blobs/{id}/content`: the inline upload, verified against the declared size and hash.
pub async fn upload<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Body(body): Body,
) -> ApiResult<Json<Value>> {
    let agent = auth::agent(&app, &headers).await?;
    let b = app
        .store
        .blob(&id)
        .await?
        .filter(|b| b.tenant_id == agent.tenant_id && b.uploader_id == agent.id)
        .ok_or_else(ApiError::not_found)?;
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
        let key = app.tenant_key(&b.tenant_id).await?;
        let dir = app.config.data_dir.join("blobs");
        let sealed = key.seal(&body);
        let path = blob_path(&app, &b.id);
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            let tmp = path.with_extension("part");
            std::fs::write(&tmp, sealed)?;
            std::fs::File::open(&tmp)?.sync_all()?;
            std::fs::rename(&tmp, &path)
        })
        .await
        .map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?
        .map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?;
        app.store.complete_blob(&b.id).await?;
    }
    let b = app.store.blob(&id).await?.ok_or_else(ApiError::not_found)?;
    Ok(Json(blob_json(&app, &b).await?))
}

/// `GET /v1/blobs/{id}`: metadata and the download target.
pub async fn get<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> ApiResult<Json<Value>> {
    let agent = auth::agent(&app, &headers).await?;
    let b = readable(&app, &agent, &id).await?;
    let mut out = blob_json(&app, &b).await?;
    out["download"] = json!({"method": "GET", "url": format!("/v1/blobs/{}/content", b.id)});
    Ok(Json(out))
}

/// The blob `id` and its bytes, for an agent that may use it (its uploader, a party of a message
/// referencing it) or an admin whose scope covers the workspace of such an agent; any other blob
/// answers as one that does not exist. Expired is AB-4009, not uploaded yet AB-4021.
pub async fn content_for<S: Store>(
    app: &App<S>,
    who: &Principal,
    id: &str,
) -> ApiResult<(BlobRow, Vec<u8>)> {
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
    let sealed = tokio::fs::read(blob_path(app, &b.id))
        .await
        .map_err(|e| ApiError::new(Code::StorageUnavailable, e.to_string()))?;
    let key = app.tenant_key(&b.tenant_id).await?;
    let plain = key
        .open(&sealed)
        .ok_or_else(|| ApiError::new(Code::StorageUnavailable, "blob content does not open"))?;
    Ok((b, plain))
}

/// A blob's bytes as a download: `Content-Disposition: attachment` with its name, `nosniff`, and
/// a sandboxing CSP, so a browser saves it and never renders it in the gateway's origin, whatever
/// its declared type. The declared media type is kept only when it is a plain `type/subtype`.
pub fn attachment(b: &BlobRow, bytes: Vec<u8>) -> Response {
    let media = b
        .media_type
        .as_deref()
        .filter(|m| is_media_type(m))
        .unwrap_or("application/octet-stream");
    let mut resp = bytes.into_response();
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
    resp
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

/// `GET /v1/blobs/{id}/content`: the bytes, as an attachment.
pub async fn download<S: Store>(
    State(app): State<Arc<App<S>>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let result: ApiResult<Response> = async {
        let agent = auth::agent(&app, &headers).await?;
        let (b, bytes) = content_for(&app, &Principal::Agent(agent), &id).await?;
        Ok(attachment(&b, bytes))
    }
    .await;
    result.unwrap_or_else(IntoResponse::into_response)
}

/// Checks every `data.attachments[].ref` and returns the referenced blob ids (§9). A `ref` naming
/// another tenant (`blob://<slug>/…` with a slug not the sender's) is AB-4022, decided from the
/// text alone; a blob the sender may not use, of its own tenant or another, answers AB-4008
/// exactly like one that does not exist; then pending is AB-4021, expired AB-4009, and a size or
/// hash differing from the blob AB-3021.
pub async fn check_attachments<S: Store>(
    app: &App<S>,
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
