//! docs/architecture.md's map of which crate depends on which matches the manifests
//! (`cargo metadata`): the map is what a newcomer reads first, so it must not drift.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

type Map = BTreeMap<String, BTreeSet<String>>;

/// The map as documented: the `text` block after "What each crate depends on", lines
/// `crate → dep, dep, ...`.
fn documented(doc: &str) -> Map {
    let start = doc
        .find("What each crate depends on")
        .expect("docs/architecture.md has the dependency map");
    let block = &doc[start..];
    let open = block.find("```text\n").expect("the map is a text block") + "```text\n".len();
    let close = block[open..].find("```").expect("the block ends") + open;
    let mut map = Map::new();
    for line in block[open..close].lines().filter(|l| !l.trim().is_empty()) {
        let (krate, deps) = line
            .split_once('→')
            .unwrap_or_else(|| panic!("map line without an arrow: {line:?}"));
        let deps: BTreeSet<String> = deps
            .split(',')
            .map(str::trim)
            .filter(|d| !d.is_empty())
            .map(String::from)
            .collect();
        assert!(
            map.insert(krate.trim().to_string(), deps).is_none(),
            "{line:?} listed twice"
        );
    }
    map
}

/// The map from the manifests: each workspace package's normal dependencies on other workspace
/// packages.
fn manifests(root: &Path) -> Map {
    let out = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .expect("running cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let m: serde_json::Value = serde_json::from_slice(&out.stdout).expect("cargo metadata JSON");
    let packages = m["packages"].as_array().expect("packages");
    let names: BTreeSet<String> = packages
        .iter()
        .map(|p| p["name"].as_str().expect("name").to_string())
        .collect();
    packages
        .iter()
        .map(|p| {
            let deps = p["dependencies"]
                .as_array()
                .expect("dependencies")
                .iter()
                .filter(|d| d["kind"].is_null())
                .map(|d| d["name"].as_str().expect("name").to_string())
                .filter(|d| names.contains(d))
                .collect();
            (p["name"].as_str().expect("name").to_string(), deps)
        })
        .collect()
}

#[test]
fn the_documented_dependency_map_matches_the_manifests() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let doc = std::fs::read_to_string(root.join("docs/architecture.md")).unwrap();
    let doc = documented(&doc);
    let real = manifests(&root);
    let mut wrong = Vec::new();
    for (k, deps) in &real {
        match doc.get(k) {
            None => wrong.push(format!("{k} is missing (it depends on {deps:?})")),
            Some(d) if d != deps => {
                wrong.push(format!("{k}: documented {d:?}, the manifest has {deps:?}"))
            }
            Some(_) => {}
        }
    }
    for k in doc.keys().filter(|k| !real.contains_key(*k)) {
        wrong.push(format!("{k} is documented but is not a workspace crate"));
    }
    assert!(
        wrong.is_empty(),
        "docs/architecture.md's dependency map is out of date:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn no_application_stage_uses_the_control_crate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for app in ["lb", "switch", "flowlet", "cluster"] {
        // `stage.rs`, or `stage/` with its files.
        let file = root.join(format!("crates/{app}/src/stage.rs"));
        let dir = root.join(format!("crates/{app}/src/stage"));
        let mut files = Vec::new();
        if file.is_file() {
            files.push(file);
        }
        if let Ok(entries) = std::fs::read_dir(&dir) {
            files.extend(entries.filter_map(|e| e.ok()).map(|e| e.path()));
        }
        assert!(
            !files.is_empty(),
            "crates/{app}/src has no stage.rs or stage/"
        );
        for f in files {
            let text =
                std::fs::read_to_string(&f).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
            assert!(
                !text.contains("fp_control"),
                "{} uses fp-control: a stage takes no lock, reads no clock, logs nothing",
                f.display()
            );
        }
    }
}
