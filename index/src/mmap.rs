//! `SealedBytes`: immutable bytes shared by `Arc`, either a read-only map of a sealed file or an
//! owned, 8-byte-aligned copy (used by the fault-injecting storage and by tests).
//!
//! The map itself is one of the crate's two `unsafe` sites (the other is
//! `kernels/x86.rs`); `docs/safety.md` states the contract.

use crate::error::{IndexError, Result};
use std::fs::File;
use std::sync::Arc;

#[derive(Debug)]
enum Backing {
    Mapped(memmap2::Mmap),
    Owned { words: Vec<u64>, len: usize },
}

/// Immutable bytes of a sealed file. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SealedBytes {
    backing: Arc<Backing>,
}

impl SealedBytes {
    /// Maps `file` read-only, pre-faulting its pages (`MAP_POPULATE`): every sealed file is
    /// read whole at open to verify its checksum, and faulting 4 KiB at a time cost ~40% of
    /// opening a 1M-record store. The segment reader checks the length before forming slices.
    ///
    /// # Errors
    /// `Io` when the map fails.
    pub fn map_file(file: &File, name: &str) -> Result<SealedBytes> {
        let len = file
            .metadata()
            .map_err(|source| IndexError::Io {
                file: name.to_owned(),
                source,
            })?
            .len();
        if len == 0 {
            // NOTE: a zero-length map is refused by the kernel; an empty owned buffer reads the same.
            return Ok(SealedBytes::copy_from(&[]));
        }
        #[expect(unsafe_code, reason = "mmap of a sealed segment or checkpoint")]
        // SAFETY: the engine maps only files it wrote as *.tmp, fsynced and renamed into place,
        // and never opens for writing again (docs/durability.md step C1), and at recovery the
        // log files it replays, which nothing writes until the map is dropped (the newest is
        // cut or appended to only after its replay; docs/safety.md). It holds
        // the store's LOCK, so no other amberdb process writes the directory. Another process
        // truncating the file could still raise SIGBUS; docs/safety.md lists that as outside
        // our contract.
        let map =
            unsafe { memmap2::MmapOptions::new().populate().map(file) }.map_err(|source| {
                IndexError::Io {
                    file: name.to_owned(),
                    source,
                }
            })?;
        Ok(SealedBytes {
            backing: Arc::new(Backing::Mapped(map)),
        })
    }

    /// An owned, 8-byte-aligned copy of `bytes`.
    #[must_use]
    pub fn copy_from(bytes: &[u8]) -> SealedBytes {
        let mut words = vec![0u64; bytes.len().div_ceil(8)];
        if let Some(dst) = bytemuck::cast_slice_mut::<u64, u8>(&mut words).get_mut(..bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        SealedBytes {
            backing: Arc::new(Backing::Owned {
                words,
                len: bytes.len(),
            }),
        }
    }

    /// The bytes.
    #[must_use]
    pub fn as_slice(&self) -> &[u8] {
        match &*self.backing {
            Backing::Mapped(m) => m,
            Backing::Owned { words, len } => bytemuck::cast_slice::<u64, u8>(words)
                .get(..*len)
                .unwrap_or(&[]),
        }
    }

    /// Whether `other` is a clone of these very bytes (the same map or copy), not merely
    /// equal ones.
    #[must_use]
    pub fn same(&self, other: &SealedBytes) -> bool {
        Arc::ptr_eq(&self.backing, &other.backing)
    }

    /// Length in bytes.
    #[must_use]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether there are no bytes.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}
