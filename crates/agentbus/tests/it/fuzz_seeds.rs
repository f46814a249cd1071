//! The fuzz targets' corpora replayed as a test: every committed seed
//! (`fuzz/corpus/<target>/`) and every input a fuzzer once crashed on (`fuzz/regressions/<target>/`)
//! goes through the same function the fuzz target calls (`fuzz/src/lib.rs`, a dev-dependency
//! without its libFuzzer driver), so a property broken again fails the README's test command, not
//! only `scripts/fuzz`.

use std::io::Write as _;

use agentbus_fuzz as checks;

/// Every target's seeds and regressions pass its checks; every target has seeds, and every
/// corpus folder is a target's.
#[test]
fn every_fuzz_seed_and_regression_passes_its_target() {
    let root = crate::repo().join("fuzz");
    let mut runs = 0;
    let mut report = Vec::new();
    for kind in ["corpus", "regressions"] {
        let Ok(dirs) = std::fs::read_dir(root.join(kind)) else {
            continue;
        };
        for dir in dirs {
            let dir = dir.unwrap().path();
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            let (_, check) = checks::TARGETS
                .iter()
                .find(|(t, _)| *t == name)
                .unwrap_or_else(|| panic!("fuzz/{kind}/{name} is no target's"));
            let mut n = 0;
            for f in std::fs::read_dir(&dir).unwrap() {
                let path = f.unwrap().path();
                let data = std::fs::read(&path).unwrap();
                let ok = std::panic::catch_unwind(|| check(&data));
                assert!(ok.is_ok(), "fuzz/{kind}/{name}/{}", path.display());
                n += 1;
            }
            if kind == "corpus" {
                assert!(n > 0, "fuzz/corpus/{name} has no seed");
            }
            report.push(format!("{kind}/{name} {n}"));
            runs += n;
        }
    }
    for (t, _) in checks::TARGETS {
        assert!(
            root.join("corpus").join(t).is_dir(),
            "the target {t} has no seed corpus"
        );
    }
    // Written past the test harness's capture, so CI's log shows the count.
    let _ = writeln!(
        std::io::stderr(),
        "fuzz corpus replay: {runs} inputs through {} targets ({})",
        checks::TARGETS.len(),
        report.join(", ")
    );
}
