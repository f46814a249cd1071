//! `agentbus envelope canonical|sign|verify|validate|cloudevent`: the protocol core on files or
//! standard input, for implementers and for debugging a rejected publish.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Subcommand;
use serde_json::{Value, json};

use agentbus_protocol::cloudevents;
use agentbus_protocol::envelope::{Envelope, ValidateOptions};
use agentbus_protocol::ids::{Id, IdKind};
use agentbus_protocol::signing::{self, PublicKey};
use agentbus_protocol::{Code, jcs, json as ijson};
use agentbus_runtime::keyfile;

use super::{read_input, stdin_path};
use crate::error::{CliError, CliResult, ErrorKind};
use crate::printer::Printer;

/// `agentbus envelope …`.
#[derive(Debug, Subcommand)]
pub enum EnvelopeArgs {
    /// Print the RFC 8785 canonical form of a JSON document, or with --signing-input the exact bytes
    /// §3.1 signs (without `sig` and the gateway-set attributes).
    #[command(
        after_help = "Examples:\n  agentbus envelope canonical msg.json\n  agentbus envelope canonical --signing-input < msg.json | xxd"
    )]
    Canonical {
        /// The JSON file; - for standard input.
        #[arg(default_value_os_t = stdin_path())]
        file: PathBuf,
        /// Print the signed bytes of an envelope instead of the whole document's canonical form.
        #[arg(long)]
        signing_input: bool,
    },
    /// Sign an envelope and print it with `sig` set.
    #[command(
        after_help = "Example:\n  agentbus envelope sign --key bot.key --key-id key_01J9ZK6Q8R2M3N4P5Q6R7S8T9V msg.json"
    )]
    Sign {
        /// The envelope; - for standard input.
        #[arg(default_value_os_t = stdin_path())]
        file: PathBuf,
        /// The private key file (base64url seed or PKCS#8 PEM).
        #[arg(long)]
        key: PathBuf,
        /// The `key_` id the gateway returned when the public key was registered.
        #[arg(long)]
        key_id: String,
    },
    /// Verify an envelope's signature against a public key.
    #[command(
        after_help = "Example:\n  agentbus envelope verify --public-key 11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo msg.json"
    )]
    Verify {
        /// The envelope; - for standard input.
        #[arg(default_value_os_t = stdin_path())]
        file: PathBuf,
        /// The signer's Ed25519 public key, base64url.
        #[arg(long)]
        public_key: String,
    },
    /// Check an envelope against §2 and its type's schema, listing every problem.
    #[command(
        after_help = "Examples:\n  agentbus envelope validate msg.json\n  agentbus envelope validate --no-sig-check spec-example.json"
    )]
    Validate {
        /// The envelope; - for standard input.
        #[arg(default_value_os_t = stdin_path())]
        file: PathBuf,
        /// Do not check the form of `sig` (for examples with placeholder signatures).
        #[arg(long)]
        no_sig_check: bool,
    },
    /// Project an envelope onto CloudEvents-valid attribute names, or back with --reverse.
    #[command(
        after_help = "Example:\n  agentbus envelope cloudevent msg.json | agentbus envelope cloudevent --reverse"
    )]
    Cloudevent {
        /// The envelope (or CloudEvent, with --reverse); - for standard input.
        #[arg(default_value_os_t = stdin_path())]
        file: PathBuf,
        /// Turn a projected CloudEvent back into the envelope.
        #[arg(long)]
        reverse: bool,
    },
}

/// Runs `agentbus envelope`.
pub fn run(args: EnvelopeArgs, printer: &Printer) -> CliResult {
    match args {
        EnvelopeArgs::Canonical {
            file,
            signing_input,
        } => {
            let bytes = read_input(&file)?;
            let value = parse(&bytes)?;
            let canonical = if signing_input {
                let map = value.as_object().ok_or_else(|| {
                    CliError::input("--signing-input needs an envelope (a JSON object)")
                        .code(Code::MalformedJson)
                })?;
                signing::signing_bytes(map)
            } else {
                jcs::canonicalize(&value)
            }
            .map_err(|e| CliError::input(e.to_string()).code(Code::MalformedJson))?;
            if printer.is_json() {
                printer.json(&json!({"canonical": String::from_utf8_lossy(&canonical)}))?;
            } else {
                printer.raw(&canonical)?;
            }
        }
        EnvelopeArgs::Sign { file, key, key_id } => {
            let mut env = parse_envelope(&read_input(&file)?)?;
            let key = keyfile::read_any_mode(&key).map_err(|e| CliError::input(e.to_string()))?;
            let key_id = Id::parse_kind(&key_id, IdKind::Key).map_err(|e| {
                CliError::input(format!("--key-id: {e}"))
                    .fix("pass the key_ id returned when the public key was registered")
            })?;
            signing::sign_envelope(env.attrs_mut(), &key, key_id)
                .map_err(|e| CliError::input(e.to_string()).code(Code::MalformedJson))?;
            printer.data_line(&env.to_json())?;
        }
        EnvelopeArgs::Verify { file, public_key } => {
            let env = parse_envelope(&read_input(&file)?)?;
            let public = PublicKey::from_base64url(&public_key)
                .map_err(|e| CliError::input(format!("--public-key: {e}")).code(Code::WeakKey))?;
            let key_id = signing::envelope_sig(env.attrs())
                .ok()
                .map(|s| s.key_id.to_string());
            match signing::verify_envelope(env.attrs(), &public) {
                Ok(()) => printer.either(
                    &json!({"verified": true, "key_id": key_id, "code": null, "message": null}),
                    &format!(
                        "verified: signature by {} is valid",
                        key_id.unwrap_or_default()
                    ),
                )?,
                Err(e) => {
                    let code = e.code();
                    if printer.is_json() {
                        printer.json(&json!({"verified": false, "key_id": key_id, "code": code.to_string(), "message": e.to_string()}))?;
                        return Ok(ErrorKind::Failed.exit_code());
                    }
                    return Err(CliError::new(ErrorKind::Failed, e.to_string()).code(code));
                }
            }
        }
        EnvelopeArgs::Validate { file, no_sig_check } => {
            let bytes = read_input(&file)?;
            let env = parse_envelope(&bytes)?;
            let violations = env.validate(ValidateOptions {
                received_bytes: Some(bytes.len()),
                check_sig_form: !no_sig_check,
                ..ValidateOptions::default()
            });
            if printer.is_json() {
                printer.json(&json!({"valid": violations.is_empty(), "violations": violations}))?;
            } else if violations.is_empty() {
                printer.line("valid")?;
            } else {
                for v in &violations {
                    let path = if v.path.is_empty() {
                        "(envelope)"
                    } else {
                        &v.path
                    };
                    printer.line(&format!("{} {path}: {}", v.code, v.message))?;
                }
            }
            if !violations.is_empty() {
                return Ok(ErrorKind::Failed.exit_code());
            }
        }
        EnvelopeArgs::Cloudevent { file, reverse } => {
            let value = parse(&read_input(&file)?)?;
            let map = value.as_object().ok_or_else(|| {
                CliError::input("expected a JSON object").code(Code::MalformedJson)
            })?;
            let out = if reverse {
                cloudevents::from_cloudevent(map).map_err(|e| CliError::input(e.to_string()))?
            } else {
                cloudevents::to_cloudevent(map)
            };
            printer.data_line(&Value::Object(out).to_string())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn parse(bytes: &[u8]) -> Result<Value, CliError> {
    ijson::parse(bytes).map_err(|e| {
        CliError::input(e.to_string())
            .code(Code::MalformedJson)
            .fix("send one I-JSON document: no duplicate keys, integers within ±(2^53−1)")
    })
}

fn parse_envelope(bytes: &[u8]) -> Result<Envelope, CliError> {
    Envelope::parse(bytes).map_err(|e| CliError::input(e.to_string()).code(e.code()))
}
