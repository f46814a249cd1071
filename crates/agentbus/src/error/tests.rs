//! Every library error reaches the user through [`CliError::of`]. Each table below lists every
//! variant of one library's error enum (the `match` is exhaustive, so a new variant fails to
//! compile here until it is given its row) with the exit kind and fix the command line shows,
//! which are those the hand-written mappings gave before the catalogue held them.

use std::path::PathBuf;

use agentbus_client::ClientError;
use agentbus_client::http::CONNECTION_REFUSED;
use agentbus_gateway::StartError;
use agentbus_local::address::{AddressError, RouteError};
use agentbus_local::hook::HookError;
use agentbus_local::install::InstallError;
use agentbus_local::pace::Pace;
use agentbus_local::send::{ImportError, ResolveError};
use agentbus_local::session::BindError;
use agentbus_local::trust::TrustError;
use agentbus_local::{SendError, StoreError};
use agentbus_protocol::Code;
use agentbus_protocol::errors::Catalogued;
use agentbus_runtime::keyfile::KeyFileError;
use agentbus_share::ShareError;
use agentbus_work::WorkError;

use super::{CliError, ErrorKind};
use ErrorKind::{Config, Failed, Input, Internal, Refused, Unavailable, Usage};

/// Converts each error and checks its kind and fix against the row its variant's match gives.
#[track_caller]
fn check<E: Catalogued>(errors: Vec<E>, expected: impl Fn(&E) -> (ErrorKind, &'static str)) {
    for e in errors {
        let (kind, fix) = expected(&e);
        let shown = e.to_string();
        let code = e.code();
        let cli = CliError::of(e);
        assert_eq!(cli.kind, kind, "{shown}");
        assert_eq!(cli.fix.as_deref(), Some(fix), "{shown}");
        assert_eq!(cli.code, Some(code), "{shown}");
        assert_eq!(
            cli.kind.exit_code(),
            std::process::ExitCode::from(code.entry().kind.exit_code()),
            "{shown}"
        );
    }
}

fn io() -> std::io::Error {
    std::io::Error::other("denied")
}

fn store_row(e: &StoreError) -> (ErrorKind, &'static str) {
    match e {
        StoreError::Io { .. } => (
            Config,
            "check that the agentbus state directory (AGENTBUS_HOME) is writable",
        ),
        StoreError::NoHome => (Config, "export AGENTBUS_HOME=/path/to/state"),
        StoreError::BadSession(_) => (
            Input,
            "run `agentbus sessions` to list the sessions of this machine",
        ),
    }
}

fn stores() -> Vec<StoreError> {
    vec![
        StoreError::Io {
            path: PathBuf::from("/x"),
            source: io(),
        },
        StoreError::NoHome,
        StoreError::BadSession("a/b".into()),
    ]
}

#[test]
fn local_store_errors() {
    check(stores(), store_row);
}

#[test]
fn send_errors() {
    let window = |pace| SendError::WindowFull {
        to: "local@n".into(),
        outstanding: 1,
        size: 1,
        pace,
        next_in_ms: Some(5_000),
    };
    let mut errors = vec![
        window(Pace::Floor),
        window(Pace::Rate),
        window(Pace::Window),
        SendError::Share {
            to: "s".into(),
            pushed: "lm_1".into(),
        },
        SendError::ClockBehind {
            to: "s".into(),
            latest_ms: 1,
        },
        SendError::NotAdmitted("no".into()),
        SendError::Malformed("long".into()),
    ];
    errors.extend(stores().into_iter().map(SendError::Store));
    check(errors, |e| match e {
        SendError::Store(e) => store_row(e),
        SendError::WindowFull {
            pace: Pace::Floor | Pace::Rate,
            ..
        } => (
            Failed,
            "send it again when that time has passed, or to one session by name (agentbus sessions lists them)",
        ),
        SendError::WindowFull { .. } | SendError::Share { .. } => (
            Failed,
            "wait until the recipient reads your earlier messages (agentbus sessions shows unread counts)",
        ),
        SendError::ClockBehind { .. } => (Failed, "check this machine's clock"),
        SendError::NotAdmitted(_) => (
            Failed,
            "steer only sessions of this machine, from the engineer's terminal",
        ),
        SendError::Malformed(_) => (
            Input,
            "remove control characters and shorten the message, then send it again",
        ),
    });
    // The refusal names its reason first, as it always has.
    let line = CliError::of(SendError::ClockBehind {
        to: "s".into(),
        latest_ms: 1,
    })
    .to_string();
    assert!(line.starts_with("refused (clock_behind): "), "{line}");
}

#[test]
fn resolve_route_bind_hook_import_errors() {
    let mut resolve = vec![
        ResolveError::Address(AddressError("?".into())),
        ResolveError::Unknown("zz".into()),
        ResolveError::Ambiguous {
            word: "a".into(),
            candidates: vec!["a1".into(), "a2".into()],
        },
    ];
    resolve.extend(stores().into_iter().map(ResolveError::Store));
    check(resolve, |e| match e {
        ResolveError::Store(e) => store_row(e),
        ResolveError::Address(_) => (
            Usage,
            "run `agentbus sessions` to list the sessions of this machine",
        ),
        ResolveError::Unknown(_) | ResolveError::Ambiguous { .. } => {
            (Input, "give more of the session id, or its full id")
        }
    });
    check(
        vec![RouteError::Empty, RouteError::BadShare("share:a".into())],
        |e| match e {
            RouteError::Empty => (
                Usage,
                "name a recipient: local, all, engineer, <session>, agent://…, share:<operator>/<agent>",
            ),
            RouteError::BadShare(_) => (
                Usage,
                "write share:<operator>/<agent>, or share:<operator>/any",
            ),
        },
    );
    let mut bind = vec![
        BindError::UnknownSession("s".into()),
        BindError::BadAgent("x".into()),
    ];
    bind.extend(stores().into_iter().map(BindError::Store));
    check(bind, |e| match e {
        BindError::Store(e) => store_row(e),
        BindError::UnknownSession(_) => (Input, "run `agentbus sessions` to list them"),
        BindError::BadAgent(_) => (
            Usage,
            "use agent://<tenant>/<workspace>/<name> or share:<operator>/<agent>",
        ),
    });
    let mut hook = vec![HookError::BadEvent {
        harness: "claude",
        why: "no session_id".into(),
    }];
    hook.extend(stores().into_iter().map(HookError::Store));
    check(hook, |e| match e {
        HookError::Store(e) => store_row(e),
        HookError::BadEvent { .. } => (
            Input,
            "let the harness run the hook (agentbus hooks install); `agentbus hooks status` shows what is installed",
        ),
    });
    let mut import = vec![
        ImportError::LocalTransport,
        ImportError::BadRecipient("x".into()),
        ImportError::BadSender("x".into()),
        ImportError::Malformed("long"),
    ];
    import.extend(stores().into_iter().map(ImportError::Store));
    check(import, |e| match e {
        ImportError::Store(e) => store_row(e),
        ImportError::LocalTransport
        | ImportError::BadRecipient(_)
        | ImportError::BadSender(_)
        | ImportError::Malformed(_) => (
            Internal,
            "this is a bug in agentbus; please report it with the command you ran",
        ),
    });
}

fn install_row(e: &InstallError) -> (ErrorKind, &'static str) {
    match e {
        InstallError::Store(e) => store_row(e),
        InstallError::NotJson { .. } => (
            Config,
            "fix or move the file named above, then run this again",
        ),
        InstallError::NotOurs(_) => (
            Config,
            "move or rename the one named above, then run this again",
        ),
    }
}

fn installs() -> Vec<InstallError> {
    let mut v = vec![
        InstallError::NotJson {
            path: "/s.json".into(),
            why: "eof".into(),
        },
        InstallError::NotOurs("/p.js".into()),
    ];
    v.extend(stores().into_iter().map(InstallError::Store));
    v
}

#[test]
fn hook_install_and_trust_errors() {
    check(installs(), install_row);
    let mut trust = vec![TrustError::Config {
        path: "/c.toml".into(),
        why: "not TOML".into(),
    }];
    trust.extend(installs().into_iter().map(TrustError::Install));
    check(trust, |e| match e {
        TrustError::Install(e) => install_row(e),
        TrustError::Config { .. } => (
            Config,
            "fix the file named above (Codex reads it too), then run this again",
        ),
    });
}

fn client_row(e: &ClientError) -> (ErrorKind, &'static str) {
    match e {
        ClientError::Unreachable { detail, .. } if detail == CONNECTION_REFUSED => (
            Unavailable,
            "start the gateway (agentbus gateway), or connect again with its right URL: agentbus connect --gateway <url> …",
        ),
        ClientError::Unreachable { .. } => (
            Unavailable,
            "check that the gateway is running and its URL in the profile (agentbus doctor)",
        ),
        ClientError::Api { code: Some(_), .. } => (
            Refused,
            "the profile's credential is not accepted: connect again (agentbus connect --gateway <url> --token <token> --name <agent>), or choose another profile with --profile",
        ),
        ClientError::Api { code: None, .. } => {
            (Refused, "see the gateway's documentation for this error")
        }
        ClientError::Protocol(_) => (
            Unavailable,
            "check that the URL is an AgentBus gateway of a compatible version",
        ),
        ClientError::NoProfile(name) if name.is_empty() => (
            Config,
            "run: agentbus connect --gateway <url> --token <token> --name <agent>",
        ),
        ClientError::NoProfile(_) => (
            Config,
            "run `agentbus connect` for it, or pick a saved one with --profile",
        ),
        ClientError::AmbiguousProfile(_) => {
            (Config, "pass --profile <name> or set AGENTBUS_PROFILE")
        }
        ClientError::NoHome => (Config, "export AGENTBUS_HOME=/path/to/state"),
        ClientError::Io { .. } => (
            Config,
            "check that the agentbus state directory (AGENTBUS_HOME) is writable",
        ),
        ClientError::Key(_) => (
            Config,
            "chmod 600 the key file, or reconnect to register a new key",
        ),
        ClientError::KeychainUnavailable(_) => (
            Input,
            "unlock or start the OS keychain (on Linux a Secret Service on the session D-Bus), or unset AGENTBUS_KEYSTORE to keep the key in a 0600 file",
        ),
        ClientError::Keychain(_) => (
            Config,
            "run where the OS keychain is reachable and unlocked (on Linux: the session D-Bus and its Secret Service), then again",
        ),
        ClientError::KeychainKey(_) => (
            Config,
            "reconnect to register a new key (a lost private key cannot be recovered)",
        ),
        ClientError::KeychainKeyExists(_) => (
            Config,
            "delete that keychain entry only if no profile uses it, then connect again",
        ),
        ClientError::Invalid(_) => (
            Input,
            "check the value; `agentbus <command> --help` shows the expected form",
        ),
        ClientError::Address(_) => (
            Usage,
            "write agent://<tenant>/<workspace>/<name>, topic://<tenant>/<workspace>/<topic> or an agt_ id; `agentbus agents` lists the addresses",
        ),
        ClientError::GatewayUrl { .. } => (
            Usage,
            "write the whole URL, e.g. --gateway http://127.0.0.1:7700",
        ),
        ClientError::Import(_) => (
            Config,
            "check that the local store (AGENTBUS_HOME) is writable",
        ),
        ClientError::Attachment { .. } => (Input, "check the path given to --attach"),
        ClientError::UnknownMessage { .. } => (
            Input,
            "check the id; `agentbus sidecar --once` receives what is waiting",
        ),
        ClientError::WrongId { .. } => (
            Usage,
            "`agentbus inbox --json` and `agentbus tasks` show every id of a message and its task",
        ),
        ClientError::UnknownTask { .. } => (Input, "pass the task's tsk_ id"),
    }
}

fn clients() -> Vec<ClientError> {
    let s = || "x".to_owned();
    let mut v = vec![
        ClientError::Unreachable {
            url: "http://127.0.0.1:1".into(),
            detail: CONNECTION_REFUSED.into(),
        },
        ClientError::Unreachable {
            url: "http://h".into(),
            detail: "timed out".into(),
        },
        ClientError::Api {
            status: 401,
            code: Some(Code::MissingCredential),
            code_str: "AB-1001".into(),
            message: "unknown bearer token".into(),
        },
        ClientError::Api {
            status: 400,
            code: None,
            code_str: "AB-7777".into(),
            message: "new".into(),
        },
        ClientError::Protocol(s()),
        ClientError::NoProfile(String::new()),
        ClientError::NoProfile(s()),
        ClientError::AmbiguousProfile(s()),
        ClientError::NoHome,
        ClientError::Io {
            path: "/x".into(),
            source: io(),
        },
        ClientError::KeychainUnavailable(s()),
        ClientError::Keychain(s()),
        ClientError::KeychainKey(s()),
        ClientError::KeychainKeyExists(s()),
        ClientError::Invalid(s()),
        ClientError::Address(s()),
        ClientError::GatewayUrl { url: s(), why: s() },
        ClientError::Import(s()),
        ClientError::Attachment {
            path: "/a".into(),
            why: s(),
        },
        ClientError::UnknownMessage {
            id: s(),
            agent: s(),
        },
        ClientError::WrongId {
            id: s(),
            what: s(),
            needs: s(),
        },
        ClientError::UnknownTask {
            id: s(),
            agent: s(),
        },
    ];
    v.extend(
        [
            KeyFileError::Io {
                path: "/k".into(),
                source: io(),
            },
            KeyFileError::TooOpen {
                path: "/k".into(),
                mode: 0o644,
            },
            KeyFileError::Exists("/k".into()),
        ]
        .into_iter()
        .map(ClientError::Key),
    );
    v
}

#[test]
fn client_errors() {
    check(clients(), client_row);
    // A refusal's line starts with the gateway's code, named once; a code this build does not
    // know stays as the gateway wrote it; local failures carry their code in --json only.
    let lines: Vec<String> = clients()
        .into_iter()
        .map(|e| CliError::of(e).to_string())
        .collect();
    assert_eq!(
        lines[0],
        "connection refused at http://127.0.0.1:1: no gateway is listening there"
    );
    assert_eq!(lines[2], "AB-1001: unknown bearer token");
    assert_eq!(lines[3], "AB-7777: new");
    assert_eq!(lines[5], "no agent is connected on this machine");
}

#[test]
fn connect_errors() {
    use agentbus_client::connect::ConnectError;
    let api = |code: Code| ClientError::Api {
        status: 409,
        code: Some(code),
        code_str: code.to_string(),
        message: "taken".into(),
    };
    let mut errors = vec![
        ConnectError::OtherGateway {
            profile: "p".into(),
            connected: "http://a".into(),
            asked: "http://b".into(),
        },
        ConnectError::KeyNotActive {
            profile: "p".into(),
            key_id: "key_1".into(),
        },
        ConnectError::AgentIdMissing,
        ConnectError::KeyStoreChoice(ClientError::KeychainUnavailable("x".into())),
        ConnectError::NameTaken(api(Code::NameTaken)),
        ConnectError::KeyExists(ClientError::Key(KeyFileError::Exists("/k".into()))),
        ConnectError::KeyExists(ClientError::KeychainKeyExists("x".into())),
    ];
    errors.extend(clients().into_iter().map(ConnectError::Client));
    check(errors, |e| match e {
        ConnectError::OtherGateway { .. } => (
            Config,
            "connect under another profile name: agentbus --profile <new name> connect --gateway <url> …, or use that profile's gateway",
        ),
        ConnectError::KeyNotActive { .. } => (
            Config,
            "run `agentbus keys rotate` with a working key, or register a new key with the owner's token (agentbus connect --token abu_… --name <name>)",
        ),
        ConnectError::AgentIdMissing => (
            Usage,
            "pass --agent agt_… with the credential, or connect with a user token (abu_…) to register a new agent: agentbus connect --gateway <url> --token abu_… --name <name>",
        ),
        ConnectError::KeyStoreChoice(_) => (
            Input,
            "set AGENTBUS_KEYSTORE to auto, keychain or file, or unset it, then run `agentbus connect` again",
        ),
        ConnectError::NameTaken(_) => (
            Refused,
            "pick another --name or alias; to connect this machine to the agent of that name, use its credential: agentbus connect --token aba_… --agent agt_… --name <name>",
        ),
        ConnectError::KeyExists(ClientError::Key(_)) => (
            Config,
            "move the old key file away only if no profile uses it, then run `agentbus connect` again",
        ),
        ConnectError::KeyExists(_) => (
            Config,
            "delete that keychain entry only if no profile uses it, then connect again",
        ),
        ConnectError::Client(e) => client_row(e),
    });
    // The gateway's refusal keeps its code first on the line.
    let taken = CliError::of(ConnectError::NameTaken(api(Code::NameTaken)));
    assert_eq!(taken.to_string(), "AB-4005: taken");
}

#[test]
fn work_errors() {
    let mut errors = vec![
        WorkError::AlreadyRunning { agent: "a".into() },
        WorkError::NothingToServe {
            agent: "a".into(),
            why: "none".into(),
        },
        WorkError::Setting("x".into()),
        WorkError::Spawn {
            program: "p".into(),
            why: "gone".into(),
        },
        WorkError::Io {
            path: "/w".into(),
            why: "denied".into(),
        },
    ];
    errors.extend(clients().into_iter().map(WorkError::Client));
    check(errors, |e| match e {
        WorkError::AlreadyRunning { .. } => (Config, Code::WorkerRunning.entry().fix),
        WorkError::NothingToServe { .. } => (Config, Code::NothingToServe.entry().fix),
        WorkError::Setting(_) => (Input, "see agentbus work --help"),
        WorkError::Client(e) => client_row(e),
        WorkError::Spawn { .. } => (
            Config,
            "check --program and that the harness is installed (docs/work.md)",
        ),
        WorkError::Io { .. } => (
            Config,
            "check that the agentbus state directory (AGENTBUS_HOME) is writable",
        ),
    });
}

#[test]
fn share_errors() {
    let s = || "x".to_owned();
    let errors = vec![
        ShareError::Io {
            path: "/f".into(),
            source: io(),
        },
        ShareError::GitMissing(io()),
        ShareError::Git {
            args: "push".into(),
            stderr: s(),
        },
        ShareError::RemoteUnavailable(s()),
        ShareError::PushRefused(s()),
        ShareError::RetriesExhausted(5),
        ShareError::Conflict(s()),
        ShareError::NotAShare("/f".into()),
        ShareError::NotJoined,
        ShareError::BadIdent {
            what: "operator",
            value: s(),
            why: "form",
        },
        ShareError::BadAddress(s()),
        ShareError::Invalid(s()),
        ShareError::Undeclared(s()),
        ShareError::UnknownId(s()),
        ShareError::Registry(s()),
        ShareError::NotEmpty("/f".into()),
        ShareError::NoSuchDir("/f".into()),
        ShareError::Dirty(vec!["a b.md".into(), "c.md".into()]),
        ShareError::LocalEdit("it's.md".into()),
        ShareError::RegistryConflict(s()),
        ShareError::NoShareBranch {
            branch: "main".into(),
            others: vec!["trunk".into()],
        },
        ShareError::Unrelated(s()),
        ShareError::AlreadyAShare {
            url: "/srv/a b.git".into(),
            branch: "main".into(),
        },
        ShareError::RemoteHead {
            url: "/srv/s.git".into(),
            branch: "main".into(),
            head: None,
        },
        ShareError::Uninitialised,
        ShareError::UnknownRecipient(s()),
    ];
    check(errors, |e| match e {
        ShareError::Io { .. } | ShareError::Registry(_) => (Input, "check the file named above"),
        ShareError::GitMissing(_) => (Config, "install git and make sure it is on PATH"),
        ShareError::Git { .. } => (
            Config,
            "run the git command shown by hand in the checkout to see why",
        ),
        ShareError::RemoteUnavailable(_) => (
            Unavailable,
            "check the network and credentials, or work with --offline and run `agentbus share sync` later",
        ),
        ShareError::RetriesExhausted(_) => (
            Unavailable,
            "run `agentbus share sync` again; your commit is kept locally",
        ),
        ShareError::PushRefused(_) => (
            Refused,
            "ask the share's operator why the remote refuses pushes",
        ),
        ShareError::Conflict(_) => (
            Config,
            "finish it by hand (`git status` says what is left, then `git rebase --continue`) or `git rebase --abort`, then `agentbus share sync`",
        ),
        ShareError::NotAShare(_) => (
            Config,
            "pass --share <checkout>, set AGENTBUS_SHARE, or cd into a share checkout",
        ),
        ShareError::NoSuchDir(_) => (
            Config,
            "pass --share <checkout> (or AGENTBUS_SHARE) naming a folder that exists",
        ),
        ShareError::NotJoined | ShareError::Undeclared(_) => (
            Config,
            "agentbus share join --operator <you> --instance <fleet> --agent <name>",
        ),
        ShareError::BadIdent { .. } | ShareError::BadAddress(_) | ShareError::Invalid(_) => {
            (Usage, "see agentbus share <command> --help")
        }
        ShareError::UnknownRecipient(_) => (
            Usage,
            "check the address against operators.yaml, or send without --strict",
        ),
        ShareError::UnknownId(_) => (
            Input,
            "run `agentbus share sync`, then find the id with `agentbus share inbox` or `threads`",
        ),
        ShareError::NotEmpty(_) => (
            Input,
            "choose a new folder, or clone the existing share and `join` it",
        ),
        ShareError::Dirty(_) => (
            Config,
            "commit them (git commit 'a b.md' c.md) or discard them (git checkout -- 'a b.md' c.md), then run the command again",
        ),
        ShareError::LocalEdit(_) => (
            Config,
            "undo that change in a new commit (`git log -p -- 'it'\\''s.md'` shows it; then `git checkout @{upstream} -- 'it'\\''s.md'` and commit), then `agentbus share sync`",
        ),
        ShareError::RegistryConflict(_) => (
            Config,
            "merge by hand: `git rebase @{upstream}`, keep both edits in operators.yaml, `git add operators.yaml`, `git rebase --continue`; then `agentbus share sync`",
        ),
        ShareError::NoShareBranch { .. } => (
            Config,
            "check out the share's branch (git checkout trunk), or ask the share's operator which branch it is",
        ),
        ShareError::Unrelated(_) => (
            Config,
            "clone the share afresh and join there; copy anything unpushed from this checkout by hand",
        ),
        ShareError::Uninitialised => (
            Config,
            "make the share first: agentbus share init <new folder> --remote <url>; then clone it and join",
        ),
        ShareError::AlreadyAShare { .. } => (
            Input,
            "clone it and join: git clone '/srv/a b.git' <folder> && cd <folder> && agentbus share join …",
        ),
        ShareError::RemoteHead { .. } => (
            Config,
            "make main the remote's default branch: on a host, in its settings; for a bare repository on this machine, git --git-dir /srv/s.git symbolic-ref HEAD refs/heads/main",
        ),
    });
}

#[test]
fn mcp_errors() {
    use agentbus_mcp::ServeError;
    use agentbus_mcp::install::InstallError as McpInstallError;
    let serve = vec![
        ServeError::BadSession("a/b".into()),
        ServeError::Transport("closed".into()),
        ServeError::Store(StoreError::NoHome),
        ServeError::Bind(BindError::UnknownSession("s".into())),
    ];
    for e in serve {
        let code = e.code();
        let expected = match &e {
            ServeError::Store(e) => e.code(),
            ServeError::BadSession(_) => Code::BadSessionId,
            ServeError::Bind(e) => e.code(),
            ServeError::Transport(_) => Code::McpTransport,
        };
        assert_eq!(code, expected, "{e}");
    }
    check(
        vec![
            McpInstallError::Io {
                path: "/c.json".into(),
                source: io(),
            },
            McpInstallError::Unreadable {
                path: "/c.json".into(),
                format: "JSON",
                why: "eof".into(),
            },
            McpInstallError::NotOurs("/c.json".into()),
        ],
        |e| match e {
            McpInstallError::Io { .. } => {
                (Config, "check that the configuration's folder is writable")
            }
            McpInstallError::Unreadable { .. } => (
                Config,
                "fix or move the file named above, then run this again",
            ),
            McpInstallError::NotOurs(_) => (
                Config,
                "move or rename the one named above, then run this again",
            ),
        },
    );
}

/// The catalogue's kinds give the exit codes `docs/cli.md` documents.
fn start_row(e: &StartError) -> (ErrorKind, &'static str) {
    use agentbus_gateway::Mismatch;
    let dir =
        "Check that {dir} is writable by this user and holds this gateway's files (`ls -l {dir}`).";
    match e {
        StartError::Listen { .. } => (
            Unavailable,
            "Stop the other process, or choose another address with `agentbus gateway --listen ADDR` (`AGENTBUS_LISTEN`).",
        ),
        StartError::Locked(_) => (
            Config,
            "Stop the other gateway first, or give this one its own directory with `agentbus gateway --data DIR`.",
        ),
        StartError::NoData(_) => (
            Config,
            "Run it with the data directory (or `--store URL`) the first start printed: `agentbus gateway admin-token --data DIR`.",
        ),
        StartError::TestClock(Mismatch::NotATestDirectory(_)) => (
            Config,
            "Give the test gateway a new, empty directory: `agentbus gateway --unsafe-test-clock --data DIR`.",
        ),
        StartError::TestClock(Mismatch::TestDirectory(_)) => (
            Config,
            "Start it with `agentbus gateway --unsafe-test-clock` (tests only), or use another `--data` directory.",
        ),
        StartError::TestClock(Mismatch::Io { .. }) | StartError::Store(_) | StartError::Key(_) => {
            (Config, dir)
        }
        StartError::Bootstrap(_) => (Config, dir),
        StartError::DataDir { .. } => (
            Config,
            "Check that /srv/gw is writable by this user and holds this gateway's files (`ls -l /srv/gw`).",
        ),
        StartError::Database {
            unreachable: true, ..
        } => (Unavailable, "start the server"),
        StartError::Database { .. } => (Config, "create the database"),
        StartError::MasterKeyMismatch(_) => (
            Config,
            "Replicas on one database share one master.key and gateway.key: copy both from the first replica's data directory (docs/deploy.md).",
        ),
        StartError::BlobStore(_) => (Config, "create the bucket"),
    }
}

/// The gateway's start-up failures (and `admin-token`'s), each from the catalogue; the binary
/// only fills the data directory in where the error does not name it (`start_error`).
#[test]
fn gateway_start_errors() {
    use agentbus_gateway::Mismatch;
    let errors = vec![
        StartError::Listen {
            addr: "127.0.0.1:7700".into(),
            source: io(),
        },
        StartError::Locked("/srv/gw".into()),
        StartError::NoData("/srv/gw".into()),
        StartError::TestClock(Mismatch::NotATestDirectory("/srv/gw".into())),
        StartError::TestClock(Mismatch::TestDirectory("/srv/gw".into())),
        StartError::TestClock(Mismatch::Io {
            path: "/srv/gw/test-clock".into(),
            source: io(),
        }),
        StartError::Bootstrap("no tenant".into()),
        StartError::DataDir {
            path: "/srv/gw".into(),
            source: io(),
        },
        StartError::Database {
            cause: "connection refused".into(),
            fix: "start the server".into(),
            unreachable: true,
        },
        StartError::Database {
            cause: "database \"x\" does not exist".into(),
            fix: "create the database".into(),
            unreachable: false,
        },
        StartError::MasterKeyMismatch("/srv/gw".into()),
        StartError::Key(KeyFileError::Exists("/srv/gw/gateway.key".into())),
    ];
    check(errors, start_row);
}

/// One bad setting is one cause and one fix: its own, then where every setting is described.
#[test]
fn a_bad_setting_is_one_cause_and_one_fix() {
    let e = agentbus_gateway::config::SettingError {
        what: "--log \"loud\"".into(),
        cause: "not a log directive".into(),
        fix: "write a level".into(),
    };
    let cli = CliError::of(e);
    assert_eq!(cli.message, "--log \"loud\": not a log directive");
    assert_eq!(
        cli.fix.as_deref(),
        Some(
            "write a level; docs/settings.md lists every setting, and `agentbus gateway --print-config` shows where each value came from."
        )
    );
    assert_eq!(cli.code, Some(Code::SettingUnusable));
    assert_eq!(cli.kind, Config);
}

#[test]
fn kinds_give_the_documented_exit_codes() {
    use agentbus_protocol::errors::Kind;
    for kind in Kind::ALL {
        assert_eq!(
            ErrorKind::from(*kind).exit_code(),
            std::process::ExitCode::from(kind.exit_code()),
            "{}",
            kind.as_str()
        );
    }
}
