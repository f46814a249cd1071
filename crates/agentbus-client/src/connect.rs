//! Connecting this machine to a gateway as an agent: register it (or add this machine's key to an
//! existing agent, or resume a saved profile), keep its private key and save its profile.
//!
//! This is the flow behind `agentbus connect`, as a function any front end can call (the CLI
//! prints its [`Connected`]; tests and other front ends read it).

use std::path::PathBuf;

use serde::Serialize;

use agentbus_protocol::Code;
use agentbus_protocol::signing::SigningKey;
use agentbus_runtime::keyfile::KeyFileError;
use agentbus_runtime::random_bytes;

use crate::keystore::{Choice, KeyStore, KeyStoreKind};
use crate::profile::{Profile, Profiles};
use crate::{ClientError, Gateway};

/// What to connect, and as what.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// The gateway's URL.
    pub gateway: String,
    /// A user integration token (`abu_…`) to register a new agent, or an agent's credential
    /// (`aba_…`) with [`agent`](Self::agent) to add this machine's key to that agent.
    pub token: String,
    /// The agent's name, registered with a user token.
    pub name: String,
    /// The profile to save (or resume); `None`: the agent's name.
    pub profile: Option<String>,
    /// The existing agent's `agt_` id, when `token` is its credential.
    pub agent: Option<String>,
    /// Where a new key goes; `None`: as `$AGENTBUS_KEYSTORE` asks.
    pub key_store: Option<Choice>,
}

/// Whether the profile was made now or already existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnectStatus {
    /// A new key was registered and a new profile saved.
    Connected,
    /// The saved profile works as it is: its key is readable and registered.
    Resumed,
}

impl ConnectStatus {
    /// The word a person is shown: `connected` or `resumed`.
    pub fn as_str(self) -> &'static str {
        match self {
            ConnectStatus::Connected => "connected",
            ConnectStatus::Resumed => "resumed",
        }
    }
}

/// The outcome of [`connect`]; serialised, it is what `agentbus --json connect` prints.
#[derive(Debug, Clone, Serialize)]
pub struct Connected {
    /// Connected now, or resumed.
    pub status: ConnectStatus,
    /// The profile's name.
    pub profile: String,
    /// The gateway's URL, without a trailing slash.
    pub gateway: String,
    /// The agent's `agt_` id.
    pub agent_id: String,
    /// The agent's `agent://` address.
    pub address: String,
    /// The id of the key the agent signs with.
    pub key_id: String,
    /// Where the private key lives.
    pub key_storage: KeyStoreKind,
    /// The key file, for a key kept in a file.
    pub key_file: Option<PathBuf>,
    /// Where the key is, in words (a file's path, or the keychain entry).
    #[serde(skip)]
    pub key_location: String,
    /// The saved profile.
    #[serde(skip)]
    pub saved: Profile,
}

/// Why [`connect`] failed. Each variant that needs a fix of its own is one; the rest are the
/// client's errors as they are.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The profile exists and is connected to another gateway.
    #[error("profile {profile} is connected to {connected}, not {asked}")]
    OtherGateway {
        /// The profile's name.
        profile: String,
        /// The gateway it is connected to.
        connected: String,
        /// The gateway asked for.
        asked: String,
    },
    /// The saved profile's key is revoked or not registered at the gateway.
    #[error("profile {profile}'s key {key_id} is revoked or unknown to the gateway")]
    KeyNotActive {
        /// The profile's name.
        profile: String,
        /// Its key's id.
        key_id: String,
    },
    /// An agent credential (`aba_…`) was given without the agent's id.
    #[error("an agent credential (aba_…) needs the agent's agt_ id")]
    AgentIdMissing,
    /// `$AGENTBUS_KEYSTORE` names no key store.
    #[error(transparent)]
    KeyStoreChoice(ClientError),
    /// The name is taken at the gateway (AB-4012): the credential is only ever returned at
    /// registration, so only the agent's credential connects a new machine to it.
    #[error(transparent)]
    NameTaken(ClientError),
    /// A private key for this agent is already stored here.
    #[error(transparent)]
    KeyExists(ClientError),
    /// Any other failure: the URL, the state directory, the gateway, the key store.
    #[error(transparent)]
    Client(#[from] ClientError),
}

impl agentbus_protocol::errors::Catalogued for ConnectError {
    fn code(&self) -> Code {
        match self {
            ConnectError::OtherGateway { .. } => Code::ProfileOtherGateway,
            ConnectError::KeyNotActive { .. } => Code::ProfileKeyInactive,
            ConnectError::AgentIdMissing => Code::AgentIdMissing,
            ConnectError::KeyStoreChoice(_) => Code::KeyStoreChoice,
            ConnectError::KeyExists(ClientError::Key(KeyFileError::Exists(_))) => {
                Code::KeyFileExists
            }
            ConnectError::NameTaken(e) | ConnectError::KeyExists(e) | ConnectError::Client(e) => {
                e.code()
            }
        }
    }

    fn fix_values(&self) -> Vec<(&'static str, String)> {
        match self {
            ConnectError::Client(e) => e.fix_values(),
            _ => Vec::new(),
        }
    }
}

impl ConnectError {
    /// The `AB-` code the gateway answered, if it refused.
    pub fn gateway_code(&self) -> Option<Code> {
        match self {
            ConnectError::KeyStoreChoice(e)
            | ConnectError::NameTaken(e)
            | ConnectError::KeyExists(e)
            | ConnectError::Client(e) => e.gateway_code(),
            _ => None,
        }
    }
}

/// Connects this machine to `options.gateway` as an agent, saving the profile in `profiles`:
/// resumes the profile when it exists, works and is on that gateway; else generates a key and
/// registers a new agent (user token) or adds the key to an existing agent (its credential).
/// Where the new key goes is settled before anything is registered, so a refusal leaves nothing.
pub async fn connect(
    profiles: &Profiles,
    options: &ConnectOptions,
) -> Result<Connected, ConnectError> {
    crate::http::check_url(&options.gateway)?;
    let name = options
        .profile
        .clone()
        .unwrap_or_else(|| options.name.clone());
    let gateway = options.gateway.trim_end_matches('/').to_owned();
    // Resume: the profile exists, its key is readable where it is stored and it is registered.
    if let Ok(p) = profiles.load(&name) {
        return resume(profiles, p, gateway).await;
    }
    let store = match options.key_store {
        Some(choice) => profiles.key_store_for(choice),
        None => profiles.new_key_store(),
    }
    .map_err(|e| match e {
        ClientError::Invalid(_) => ConnectError::KeyStoreChoice(e),
        e => ConnectError::Client(e),
    })?;
    let key = SigningKey::from_seed(random_bytes());
    let public = key.public().to_base64url();
    let gw = Gateway::new(&gateway, &options.token)?;
    let (card, token, key_id) = if options.token.starts_with("aba_") {
        let Some(id) = options.agent.as_deref() else {
            return Err(ConnectError::AgentIdMissing);
        };
        let card = gw.agent(id).await?;
        let k = gw.add_key(id, &public).await?;
        (card, options.token.clone(), k.id)
    } else {
        let out = gw
            .register_agent(&options.name, &public)
            .await
            .map_err(|e| match e.gateway_code() {
                Some(Code::NameTaken) => ConnectError::NameTaken(e),
                _ => ConnectError::Client(e),
            })?;
        (
            out.agent,
            out.token,
            out.key.map(|k| k.id).unwrap_or_default(),
        )
    };
    let (agent_id, address) = (card.id.as_str(), card.address.as_str());
    if agent_id.is_empty() {
        return Err(ClientError::Protocol("a card without id".into()).into());
    }
    if token.is_empty() || key_id.is_empty() {
        return Err(ClientError::Protocol(
            "the registration answer lacks the credential or the key".into(),
        )
        .into());
    }
    store.save_new(agent_id, &key).map_err(|e| match e {
        ClientError::Key(KeyFileError::Exists(_)) | ClientError::KeychainKeyExists(_) => {
            ConnectError::KeyExists(e)
        }
        e => ConnectError::Client(e),
    })?;
    let p = Profile {
        name,
        gateway,
        agent_id: agent_id.to_owned(),
        address: address.to_owned(),
        token,
        key_id,
        key_store: store.kind(),
    };
    profiles.save(&p)?;
    Ok(connected(ConnectStatus::Connected, &store, p))
}

/// Resumes the saved profile `p` if it is on `gateway`, its key is readable and still active.
async fn resume(
    profiles: &Profiles,
    p: Profile,
    gateway: String,
) -> Result<Connected, ConnectError> {
    if p.gateway != gateway {
        return Err(ConnectError::OtherGateway {
            profile: p.name,
            connected: p.gateway,
            asked: gateway,
        });
    }
    let gw = Gateway::new(&p.gateway, &p.token)?;
    let card = gw.agent(&p.agent_id).await?;
    let store = profiles.key_store(&p)?;
    store.read_current(&p.agent_id)?;
    let active = card
        .keys
        .iter()
        .any(|k| k.id == p.key_id && k.revoked_at.is_none());
    if !active {
        return Err(ConnectError::KeyNotActive {
            profile: p.name,
            key_id: p.key_id,
        });
    }
    Ok(connected(ConnectStatus::Resumed, &store, p))
}

fn connected(status: ConnectStatus, store: &KeyStore, p: Profile) -> Connected {
    let key_file = store.key_file(&p.agent_id);
    Connected {
        status,
        profile: p.name.clone(),
        gateway: p.gateway.clone(),
        agent_id: p.agent_id.clone(),
        address: p.address.clone(),
        key_id: p.key_id.clone(),
        key_storage: store.kind(),
        key_location: match &key_file {
            Some(path) => format!("{} (mode 0600)", path.display()),
            None => store.location(&p.agent_id),
        },
        key_file,
        saved: p,
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;

    use agentbus_runtime::SystemClock;

    use super::*;

    /// A gateway served in this process on a fresh data directory until the sender is dropped:
    /// its URL and the bootstrap admin's token (a user token, so it registers agents).
    async fn gateway(dir: &std::path::Path) -> (String, String, tokio::sync::oneshot::Sender<()>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let config = agentbus_gateway::config::Config::new(addr, dir.join("gw"));
        let gw = agentbus_gateway::Gateway::open(config, Arc::new(SystemClock))
            .await
            .unwrap();
        let admin = gw.bootstrap.as_ref().unwrap().admin_token.clone();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(gw.serve_on(listener, async move {
            let _ = rx.await;
        }));
        (format!("http://{addr}"), admin, tx)
    }

    fn options(gateway: &str, token: &str, name: &str) -> ConnectOptions {
        ConnectOptions {
            gateway: gateway.to_owned(),
            token: token.to_owned(),
            name: name.to_owned(),
            profile: None,
            agent: None,
            // Never the machine's own keychain from a test.
            key_store: Some(Choice::File),
        }
    }

    #[tokio::test]
    async fn connecting_registers_the_agent_keeps_its_key_and_resumes_after() {
        let tmp = tempfile::tempdir().unwrap();
        let (url, admin, _stop) = gateway(tmp.path()).await;
        let profiles = Profiles::new(tmp.path().join("home"));

        let first = connect(
            &profiles,
            &options(&format!("{url}/"), &admin, "release-bot"),
        )
        .await
        .unwrap();
        assert_eq!(first.status, ConnectStatus::Connected);
        assert_eq!(first.profile, "release-bot");
        assert_eq!(first.gateway, url, "saved without the trailing slash");
        assert!(first.agent_id.starts_with("agt_"));
        assert!(first.address.ends_with("/release-bot"), "{}", first.address);
        assert_eq!(first.key_storage, KeyStoreKind::File);
        assert_eq!(profiles.load("release-bot").unwrap(), first.saved);
        assert!(first.saved.token.starts_with("aba_"));
        let key_file = first.key_file.clone().unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&key_file).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let doc = serde_json::to_value(&first).unwrap();
        let keys: Vec<&str> = doc
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(
            keys,
            [
                "status",
                "profile",
                "gateway",
                "agent_id",
                "address",
                "key_id",
                "key_storage",
                "key_file"
            ]
        );
        assert_eq!(doc["status"], "connected");

        let again = connect(&profiles, &options(&url, &admin, "release-bot"))
            .await
            .unwrap();
        assert_eq!(again.status, ConnectStatus::Resumed);
        assert_eq!(again.saved, first.saved);

        let elsewhere = connect(
            &profiles,
            &options("http://127.0.0.1:9", &admin, "release-bot"),
        )
        .await
        .unwrap_err();
        assert!(
            matches!(&elsewhere, ConnectError::OtherGateway { connected, .. } if *connected == url),
            "{elsewhere:?}"
        );
    }

    #[tokio::test]
    async fn an_agent_credential_adds_this_machines_key_to_its_agent() {
        let tmp = tempfile::tempdir().unwrap();
        let (url, admin, _stop) = gateway(tmp.path()).await;
        let laptop = Profiles::new(tmp.path().join("laptop"));
        let first = connect(&laptop, &options(&url, &admin, "reviewer"))
            .await
            .unwrap();
        let credential = first.saved.token.clone();

        let server = Profiles::new(tmp.path().join("server"));
        let mut opts = options(&url, &credential, "reviewer");
        let missing = connect(&server, &opts).await.unwrap_err();
        assert!(
            matches!(missing, ConnectError::AgentIdMissing),
            "{missing:?}"
        );

        opts.agent = Some(first.agent_id.clone());
        let second = connect(&server, &opts).await.unwrap();
        assert_eq!(second.status, ConnectStatus::Connected);
        assert_eq!(second.agent_id, first.agent_id);
        assert_ne!(second.key_id, first.key_id, "a key of this machine's own");

        // The same agent's key is already kept on the laptop: nothing is overwritten.
        opts.profile = Some("reviewer-2".into());
        let exists = connect(&laptop, &opts).await.unwrap_err();
        assert!(matches!(exists, ConnectError::KeyExists(_)), "{exists:?}");
    }

    #[tokio::test]
    async fn a_taken_name_is_refused_and_nothing_is_saved() {
        let tmp = tempfile::tempdir().unwrap();
        let (url, admin, _stop) = gateway(tmp.path()).await;
        connect(
            &Profiles::new(tmp.path().join("a")),
            &options(&url, &admin, "bot"),
        )
        .await
        .unwrap();
        let other = Profiles::new(tmp.path().join("b"));
        let taken = connect(&other, &options(&url, &admin, "bot"))
            .await
            .unwrap_err();
        assert!(matches!(taken, ConnectError::NameTaken(_)), "{taken:?}");
        assert_eq!(taken.gateway_code(), Some(Code::NameTaken));
        assert!(other.names().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_bad_url_is_refused_before_any_request() {
        let tmp = tempfile::tempdir().unwrap();
        let profiles = Profiles::new(tmp.path());
        let e = connect(&profiles, &options("127.0.0.1:7700", "abu_x", "bot"))
            .await
            .unwrap_err();
        assert!(
            matches!(e, ConnectError::Client(ClientError::GatewayUrl { .. })),
            "{e:?}"
        );
    }
}
