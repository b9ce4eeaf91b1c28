//! Reading what flow collectors stored, for the flow-export tests: nfdump's records of an
//! `nfcapd` directory, and fields of the one-line JSON objects pmacct writes.

use std::collections::HashMap;
use std::path::Path;

/// The fields of a flow record the flow-export tests read (nfdump format token, name): start and
/// end, source and destination address and port, protocol (a number), next hop, packets, bytes,
/// end reason (0 when the record carries none).
pub const FLOW_FIELDS: [(&str, &str); 11] = [
    ("%ts", "start"),
    ("%te", "end"),
    ("%sa", "sa"),
    ("%sp", "sp"),
    ("%da", "da"),
    ("%dp", "dp"),
    ("%pr", "pr"),
    ("%nh", "nh"),
    ("%pkt", "pkt"),
    ("%byt", "byt"),
    ("%end", "reason"),
];

/// Every record `nfdump` reads from the `nfcapd` directory `dir`, printed with the format tokens
/// of `fields` (token, name; [`FLOW_FIELDS`] for flowplane's records): one map of name to value
/// per record.
pub fn nfdump_records(
    dir: &Path,
    fields: &[(&str, &'static str)],
) -> crate::Result<Vec<HashMap<&'static str, String>>> {
    let fmt: Vec<&str> = fields.iter().map(|(t, _)| *t).collect();
    let cmd = format!("nfdump -R {} -q -N -o fmt:{}", dir.display(), fmt.join("|"));
    let out = std::process::Command::new("nfdump")
        .arg("-R")
        .arg(dir)
        .args(["-q", "-N", "-o"])
        .arg(format!("fmt:{}", fmt.join("|")))
        .output()
        .map_err(|_| crate::Error::MissingTool {
            tool: "nfdump".into(),
            package: "nfdump".into(),
        })?;
    if !out.status.success() {
        return Err(crate::Error::Failed {
            cmd,
            status: format!("{}", out.status),
            stdout: String::from_utf8_lossy(&out.stdout).into(),
            stderr: String::from_utf8_lossy(&out.stderr).into(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains('|'))
        .map(|l| {
            fields
                .iter()
                .zip(l.split('|'))
                .map(|((_, n), v)| (*n, v.trim().to_string()))
                .collect()
        })
        .collect())
}

/// The value of `key` in a flat JSON object on one line, unquoted (enough for the lines pmacct's
/// print plugin and counter log write).
pub fn json_field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    let pat = format!("\"{key}\":");
    let at = line.find(&pat)? + pat.len();
    let rest = line[at..].trim_start();
    if let Some(s) = rest.strip_prefix('"') {
        s.split('"').next()
    } else {
        let end = rest.find([',', '}']).unwrap_or(rest.len());
        Some(rest[..end].trim())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_fields_quoted_and_bare() {
        let l = r#"{"a": "x,y", "n": 12, "last": true}"#;
        assert_eq!(json_field(l, "a"), Some("x,y"));
        assert_eq!(json_field(l, "n"), Some("12"));
        assert_eq!(json_field(l, "last"), Some("true"));
        assert_eq!(json_field(l, "none"), None);
    }
}
