//! Claim-check attachments (§9): references checked at publish.

use serde_json::Value;

use agentbus_protocol::Code;
use agentbus_store::{AgentRow, Store};

use crate::app::App;
use crate::error::{ApiError, ApiResult};

/// Checks every `data.attachments[].ref` and returns the referenced blob ids: unknown → AB-4008,
/// pending → AB-4021, another tenant's or not the sender's to forward → AB-4022, size or hash
/// differing from the blob → AB-3021.
pub async fn check_attachments<S: Store>(app: &App<S>, sender: &AgentRow, data: Option<&Value>) -> ApiResult<Vec<String>> {
    let Some(items) = data.and_then(|d| d.get("attachments")).and_then(Value::as_array) else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::new();
    for (i, a) in items.iter().enumerate() {
        let r = a.get("ref").and_then(Value::as_str).unwrap_or_default();
        let id = r.rsplit('/').next().unwrap_or_default();
        let blob = app
            .store
            .blob(id)
            .await?
            .ok_or_else(|| ApiError::new(Code::UnknownAttachment, format!("attachment {i}: no blob {r}")))?;
        if blob.tenant_id != sender.tenant_id {
            // Another tenant's blob answers like one that does not exist to that tenant's peers,
            // but §9 names AB-4022 for it at publish.
            return Err(ApiError::new(Code::AttachmentForbidden, format!("attachment {i}: {r} is not yours to forward")));
        }
        if blob.uploader_id != sender.id && !app.store.blob_party(&blob.id, &sender.id).await? {
            return Err(ApiError::new(Code::AttachmentForbidden, format!("attachment {i}: {r} is not yours to forward")));
        }
        if !blob.complete {
            return Err(ApiError::new(Code::AttachmentPending, format!("attachment {i}: {r} is still pending upload")));
        }
        if blob.expires_at <= app.now() {
            return Err(ApiError::new(Code::BlobExpired, format!("attachment {i}: {r} expired")));
        }
        let size = a.get("size").and_then(Value::as_u64);
        let sha = a.get("sha256").and_then(Value::as_str);
        if size != Some(blob.size) || sha != Some(blob.sha256.as_str()) {
            return Err(ApiError::new(Code::AttachmentMismatch, format!("attachment {i}: size or sha256 differ from blob {r}")));
        }
        ids.push(blob.id);
    }
    Ok(ids)
}
