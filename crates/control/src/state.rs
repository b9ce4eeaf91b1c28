//! What outlives a process: the service's state directory and files in it that only their
//! owner may read, written so that a crash never leaves half a file. Every application keeps
//! its state there (the balancer its hash seed, backend sets and connection entries; the switch
//! its learned FIB entries), each under its own file name.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The service's state directory: `$STATE_DIRECTORY` (the first, when systemd lists several,
/// as it does for `StateDirectory=flowplane`), else `/var/lib/flowplane`.
pub fn state_directory() -> PathBuf {
    std::env::var_os("STATE_DIRECTORY")
        .and_then(|d| {
            d.to_str()
                .and_then(|s| s.split(':').next())
                .map(PathBuf::from)
        })
        .unwrap_or_else(|| PathBuf::from("/var/lib/flowplane"))
}

/// Wall-clock ms since the Unix epoch: when a process stopped, so that its successor can tell how
/// long nothing ran.
pub fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Write `bytes` to `path` readable by its owner only (mode 0600 whatever the umask), through a
/// temporary file synced and renamed into place, so a crash never leaves half a file; creates
/// the directory.
pub fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (tmp, mut f) = create_private(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)
}

/// [`write_private`] for a file streamed by `fill` (through a buffer), without waiting for the
/// disk: for a file only the next start on this machine reads, worthless after a power loss
/// anyway (connection entries and learned addresses: a reboot ends what they describe).
pub fn write_private_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (tmp, f) = create_private(path)?;
    let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
    fill(&mut w)?;
    w.into_inner().map_err(|e| e.into_error())?;
    std::fs::rename(&tmp, path)
}

/// Read and remove `path`: what a predecessor left for this start, used once. `Ok(None)` when
/// there is no file.
pub fn take(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(b) => {
            let _ = std::fs::remove_file(path);
            Ok(Some(b))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// The temporary file next to `path`, created with mode 0600 whatever the umask.
fn create_private(path: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp.{}", std::process::id()));
    let f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok((tmp, f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_written_whole_and_taken_once() {
        let dir = std::env::temp_dir().join(format!("fp-state-{}", std::process::id()));
        let path = dir.join("sub").join("f");
        write_private(&path, b"one").unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        write_private_with(&path, |w| w.write_all(b"two")).unwrap();
        assert_eq!(take(&path).unwrap().as_deref(), Some(&b"two"[..]));
        assert_eq!(take(&path).unwrap(), None, "removed once read");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
