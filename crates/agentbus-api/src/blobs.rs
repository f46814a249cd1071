//! Claim-check blobs (§9).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A blob's metadata.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Blob {
    /// Its `blb_` id.
    pub id: String,
    /// Its `blob://` reference, as attachments carry it.
    #[serde(rename = "ref")]
    pub reference: String,
    /// Its file name.
    pub name: String,
    /// Its media type, `null` when none was declared.
    pub media_type: Option<String>,
    /// Its size in bytes.
    pub size: u64,
    /// The hex SHA-256 of its content.
    pub sha256: String,
    /// `pending` or `complete`.
    pub status: String,
    /// When it was registered.
    pub created_at: String,
    /// When it expires.
    pub expires_at: String,
}

/// `POST /v1/blobs` `{name, media_type?, size, sha256}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct NewBlob {
    /// The file name.
    pub name: String,
    /// The media type (`application/octet-stream`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The size in bytes.
    pub size: u64,
    /// The hex SHA-256 of the content.
    pub sha256: String,
}

/// `POST /v1/blobs`: the pending blob and where its content goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CreatedBlob {
    /// The blob.
    #[serde(flatten)]
    pub blob: Blob,
    /// The upload target.
    pub upload: Transfer,
}

/// `GET /v1/blobs/{id}`: the blob and where its content is read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct BlobDownload {
    /// The blob.
    #[serde(flatten)]
    pub blob: Blob,
    /// The download target.
    pub download: Download,
}

/// Where content is read: the gateway's own route, or a pre-signed URL of the object store with
/// its expiry and the sealing of the content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Download {
    /// `GET`.
    pub method: String,
    /// A path of the gateway (`/v1/…`) or a pre-signed URL.
    pub url: String,
    /// When a pre-signed URL stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// How the content is sealed at rest, for a pre-signed download.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealing: Option<Sealing>,
}

/// Where content goes: the gateway's own route, or a pre-signed URL of the object store with the
/// headers it binds, its expiry, the sealing of the content and how to finish.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Transfer {
    /// `PUT`.
    pub method: String,
    /// A path of the gateway (`/v1/…`) or a pre-signed URL.
    pub url: String,
    /// The headers a pre-signed upload must send exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headers: Option<Map<String, Value>>,
    /// When a pre-signed URL stops working.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// How the content is sealed at rest, for a pre-signed transfer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sealing: Option<Sealing>,
    /// The call that finishes a pre-signed upload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub complete: Option<Call>,
    /// The most bytes an upload to the gateway takes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

/// A blob's content key and sealing scheme (agentbus-chunked-v1).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Sealing {
    /// The scheme.
    pub scheme: String,
    /// The content key, base64url.
    pub key: String,
    /// The plaintext bytes per sealed piece.
    pub piece_bytes: u64,
    /// The size of the sealed object.
    pub sealed_size: u64,
}

/// A method and a path of the gateway.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Call {
    /// The method.
    pub method: String,
    /// The path.
    pub url: String,
}

/// A `data.attachments` entry: a blob referenced from a message (§9).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Attachment {
    /// The `blob://` reference.
    #[serde(rename = "ref")]
    pub reference: String,
    /// The file name.
    pub name: String,
    /// The media type.
    pub media_type: String,
    /// The size in bytes.
    pub size: u64,
    /// The hex SHA-256 of the content.
    pub sha256: String,
}
