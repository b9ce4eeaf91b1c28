//! eBPF maps: created with `BPF_MAP_CREATE`, owned through their file descriptor (the kernel frees
//! a map when the last descriptor and the last program using it are gone), read and written from
//! user space with the element commands.

use crate::{sys, Error, Result};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

/// The map types flowplane uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MapType {
    /// Hash table (`BPF_MAP_TYPE_HASH`).
    Hash,
    /// Array indexed by a u32 (`BPF_MAP_TYPE_ARRAY`).
    Array,
    /// Array with one value per CPU (`BPF_MAP_TYPE_PERCPU_ARRAY`): counters without atomics.
    PerCpuArray,
    /// AF_XDP sockets by queue index (`BPF_MAP_TYPE_XSKMAP`), the target of `bpf_redirect_map`.
    XskMap,
    /// Another type, by its kernel number.
    Other(u32),
}

impl MapType {
    /// The kernel's number for the type.
    pub const fn raw(self) -> u32 {
        match self {
            MapType::Hash => 1,
            MapType::Array => 2,
            MapType::PerCpuArray => 6,
            MapType::XskMap => 17,
            MapType::Other(n) => n,
        }
    }

    fn from_raw(n: u32) -> MapType {
        match n {
            1 => MapType::Hash,
            2 => MapType::Array,
            6 => MapType::PerCpuArray,
            17 => MapType::XskMap,
            n => MapType::Other(n),
        }
    }

    fn per_cpu(self) -> bool {
        // PERCPU_HASH (5), PERCPU_ARRAY (6), LRU_PERCPU_HASH (10).
        matches!(self.raw(), 5 | 6 | 10)
    }
}

/// Update flags of [`Map::update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    /// Create or replace (`BPF_ANY`).
    Any,
    /// Create only (`BPF_NOEXIST`).
    NoExist,
    /// Replace only (`BPF_EXIST`).
    Exist,
}

/// Number of possible CPUs (the number of values of a per-CPU map element), from
/// `/sys/devices/system/cpu/possible` (e.g. `0-3`).
pub fn possible_cpus() -> Result<usize> {
    let s =
        std::fs::read_to_string("/sys/devices/system/cpu/possible").map_err(|e| Error::Sys {
            op: "reading /sys/devices/system/cpu/possible".into(),
            source: e,
        })?;
    parse_cpu_list(s.trim()).ok_or_else(|| {
        Error::Invalid(format!(
            "cannot parse /sys/devices/system/cpu/possible: {s:?}"
        ))
    })
}

/// The highest CPU number in a list like `0-3,8-11` plus one.
fn parse_cpu_list(s: &str) -> Option<usize> {
    let mut max = None;
    for part in s.split(',') {
        let hi = part.rsplit('-').next()?.trim().parse::<usize>().ok()?;
        max = Some(max.map_or(hi, |m: usize| m.max(hi)));
    }
    max.map(|m| m + 1)
}

/// An eBPF map owned by this process.
#[derive(Debug)]
pub struct Map {
    fd: OwnedFd,
    map_type: MapType,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    cpus: usize,
}

impl Map {
    /// Create a map. `name` (up to 15 characters of `[A-Za-z0-9_.]`) shows in `bpftool map`.
    pub fn create(
        map_type: MapType,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
        name: &str,
    ) -> Result<Map> {
        let fd = sys::map_create(map_type.raw(), key_size, value_size, max_entries, 0, name)
            .map_err(|e| Error::sys(format!("creating map {name} ({map_type:?})"), e))?;
        Self::wrap(fd, map_type, key_size, value_size, max_entries)
    }

    fn wrap(
        fd: OwnedFd,
        map_type: MapType,
        key_size: u32,
        value_size: u32,
        max_entries: u32,
    ) -> Result<Map> {
        let cpus = if map_type.per_cpu() {
            possible_cpus()?
        } else {
            1
        };
        Ok(Map {
            fd,
            map_type,
            key_size,
            value_size,
            max_entries,
            cpus,
        })
    }

    /// Open an existing map by its kernel id (e.g. one a loaded program uses).
    pub fn from_id(id: u32) -> Result<Map> {
        let fd =
            sys::map_fd_by_id(id).map_err(|e| Error::sys(format!("opening map id {id}"), e))?;
        Self::from_fd(fd).map_err(|e| e.context(format!("map id {id}")))
    }

    /// A map another process created and passed over (`SCM_RIGHTS`).
    pub fn from_fd(fd: OwnedFd) -> Result<Map> {
        let info = sys::map_info(fd.as_fd()).map_err(|e| Error::sys("reading map info", e))?;
        Self::wrap(
            fd,
            MapType::from_raw(info.map_type),
            info.key_size,
            info.value_size,
            info.max_entries,
        )
    }

    /// The kernel's description (id, name, sizes).
    pub fn info(&self) -> Result<sys::MapInfo> {
        sys::map_info(self.fd.as_fd()).map_err(|e| Error::sys("reading map info", e))
    }

    /// The file descriptor (for [`crate::asm::Asm::ld_map_fd`]).
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// The map type.
    pub fn map_type(&self) -> MapType {
        self.map_type
    }

    /// Capacity.
    pub fn max_entries(&self) -> u32 {
        self.max_entries
    }

    /// Bytes of one value as user space reads and writes it: for per-CPU maps, one value
    /// (rounded up to 8 bytes) per possible CPU.
    pub fn value_len(&self) -> usize {
        if self.map_type.per_cpu() {
            (self.value_size as usize).div_ceil(8) * 8 * self.cpus
        } else {
            self.value_size as usize
        }
    }

    fn sizes(&self) -> sys::ElemSizes {
        sys::ElemSizes {
            key: self.key_size as usize,
            value: self.value_len(),
        }
    }

    /// Insert or replace.
    pub fn update(&self, key: &[u8], value: &[u8], how: Update) -> Result<()> {
        let flags = match how {
            Update::Any => 0,
            Update::NoExist => 1,
            Update::Exist => 2,
        };
        sys::map_update(self.fd.as_fd(), self.sizes(), key, value, flags)
            .map_err(|e| Error::sys(format!("updating {:?} map", self.map_type), e))
    }

    /// The value for `key`, if present.
    pub fn lookup(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        let mut v = vec![0u8; self.value_len()];
        let found = sys::map_lookup(self.fd.as_fd(), self.sizes(), key, &mut v)
            .map_err(|e| Error::sys(format!("looking up in {:?} map", self.map_type), e))?;
        Ok(found.then_some(v))
    }

    /// Remove `key`; false if it was absent.
    pub fn delete(&self, key: &[u8]) -> Result<bool> {
        sys::map_delete(self.fd.as_fd(), self.sizes(), key)
            .map_err(|e| Error::sys(format!("deleting from {:?} map", self.map_type), e))
    }

    /// Every key (in the kernel's iteration order).
    pub fn keys(&self) -> Result<Vec<Vec<u8>>> {
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut next = vec![0u8; self.key_size as usize];
        loop {
            let prev = out.last().map(|k| k.as_slice());
            let more = sys::map_next_key(self.fd.as_fd(), self.sizes(), prev, &mut next)
                .map_err(|e| Error::sys("iterating map keys", e))?;
            if !more || out.len() > self.max_entries as usize {
                return Ok(out);
            }
            out.push(next.clone());
        }
    }

    /// For a per-CPU array of u64 counters: the sum over CPUs of entry `index`.
    pub fn percpu_u64_sum(&self, index: u32) -> Result<u64> {
        if self.map_type != MapType::PerCpuArray || self.value_size != 8 {
            return Err(Error::Invalid(format!(
                "percpu_u64_sum on a {:?} map with {}-byte values",
                self.map_type, self.value_size
            )));
        }
        let v = self.lookup(&index.to_ne_bytes())?.unwrap_or_default();
        Ok(v.chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8-byte chunk")))
            .fold(0u64, u64::wrapping_add))
    }
}

impl AsFd for Map {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list("0"), Some(1));
        assert_eq!(parse_cpu_list("0-1"), Some(2));
        assert_eq!(parse_cpu_list("0-3,8-11"), Some(12));
        assert_eq!(parse_cpu_list("x"), None);
        assert!(possible_cpus().unwrap() >= 1);
    }
}
