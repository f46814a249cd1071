//! The S3-compatible test server: moto (PyPI `moto[server]`, pinned in tests/s3/requirements.txt).
//!
//! `./scripts/test` starts one and exports its URL as `AGENTBUS_TEST_S3_URL`. Without it, the
//! first test that needs it starts `tests/s3/moto_server.py` from `./.venv-s3`, which stops when this
//! test process exits (it serves until its stdin closes); without moto in `./.venv-s3` the test fails
//! saying how to install it. Never a silent skip. Each test gets a bucket of its own.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The test server's URL, started on first use.
pub fn server() -> &'static str {
    static URL: OnceLock<Result<String, String>> = OnceLock::new();
    let url = URL.get_or_init(|| match std::env::var("AGENTBUS_TEST_S3_URL") {
        Ok(u) if !u.is_empty() => Ok(u),
        _ => start(),
    });
    match url {
        Ok(u) => u,
        Err(e) => panic!("{e}"),
    }
}

fn start() -> Result<String, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let python = root.join(".venv-s3/bin/python");
    let how = "install it with `python3 -m venv .venv-s3 && .venv-s3/bin/pip install -r tests/s3/requirements.txt` (./scripts/test does), or set AGENTBUS_TEST_S3_URL to a running S3-compatible server";
    if !python.exists() {
        return Err(format!(
            "the S3 blob tests need moto in ./.venv-s3, and {} is missing: {how}",
            python.display()
        ));
    }
    let mut child = std::process::Command::new(&python)
        .arg(root.join("tests/s3/moto_server.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}; {how}", python.display()))?;
    let mut line = String::new();
    let stdout = child.stdout.take().ok_or("no stdout")?;
    std::io::BufReader::new(stdout)
        .read_line(&mut line)
        .map_err(|e| e.to_string())?;
    if !line.starts_with("http://") {
        let _ = child.kill();
        let _ = child.wait();
        return Err(format!(
            "tests/s3/moto_server.py did not start (is moto installed in ./.venv-s3?): {how}"
        ));
    }
    // The server lives as long as its stdin is open: keep the pipe for the life of this process.
    static STDIN: OnceLock<std::process::ChildStdin> = OnceLock::new();
    if let Some(stdin) = child.stdin.take() {
        let _ = STDIN.set(stdin);
    }
    Ok(line.trim().to_owned())
}

/// A fresh bucket on the test server, and the settings that point a gateway at it.
pub struct Bucket {
    pub url: String,
    pub name: String,
    secret_file: PathBuf,
}

/// The key prefix the tests' gateways write under.
pub const PREFIX: &str = "agentbus/blobs/";

/// Creates a bucket of its own for one test (moto takes unsigned requests), with the secret in
/// a file under `dir`.
pub async fn bucket(dir: &Path) -> Bucket {
    let url = server().to_owned();
    let name = format!("t-{}", hex::encode(agentbus_runtime::random_bytes::<8>()));
    let r = crate::support::http_client()
        .put(format!("{url}/{name}"))
        .send()
        .await
        .unwrap();
    assert!(
        r.status().is_success(),
        "creating bucket {name}: {}",
        r.status()
    );
    let secret_file = dir.join("s3-secret");
    std::fs::write(&secret_file, "test-secret-key\n").unwrap();
    Bucket {
        url,
        name,
        secret_file,
    }
}

impl Bucket {
    /// Points `c` at this bucket.
    pub fn configure(&self, c: &mut agentbus_gateway::Config) {
        c.s3_endpoint = self.url.clone();
        c.s3_bucket = self.name.clone();
        c.s3_region = "us-east-1".into();
        c.s3_access_key_id = "testing".into();
        c.s3_secret_access_key_file = self.secret_file.display().to_string();
        c.s3_path_style = true;
        c.s3_prefix = PREFIX.into();
    }
}

/// The keys of every object in `bucket` (moto answers unsigned listings).
pub async fn keys(url: &str, bucket: &str) -> Vec<String> {
    let body = crate::support::http_client()
        .get(format!("{url}/{bucket}?list-type=2"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    body.split("<Key>")
        .skip(1)
        .filter_map(|s| s.split_once("</Key>").map(|(k, _)| k.to_owned()))
        .collect()
}

/// The raw bytes of an object, straight from the bucket (a signed GET of the test's own client,
/// around the gateway: moto refuses anonymous object reads).
pub async fn object(url: &str, bucket: &str, key: &str) -> Option<Vec<u8>> {
    use object_store::ObjectStoreExt as _;
    let store = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(url)
        .with_bucket_name(bucket)
        .with_region("us-east-1")
        .with_access_key_id("testing")
        .with_secret_access_key("test-secret-key")
        .with_allow_http(true)
        .build()
        .unwrap();
    match store.get(&object_store::path::Path::from(key)).await {
        Ok(r) => Some(r.bytes().await.unwrap().to_vec()),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => panic!("{key}: {e}"),
    }
}
