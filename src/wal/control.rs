//! The control file: where the last checkpoint is, and whether the
//! database was shut down cleanly. Written whole to a temporary file,
//! synced and renamed over the old one, so a crash leaves the old or the
//! new file, never a mix; a CRC-32C catches anything else.
//!
//! ```text
//! 0   magic       8 bytes "AIOCTRL1"
//! 8   state       u32 (1 shut down, 2 in production)
//! 12  block_size  u32
//! 16  segment_size u64
//! 24  checkpoint  u64  LSN of the last checkpoint record
//! 32  redo        u64  its redo point
//! 40  time        u64  seconds since the epoch
//! 48  crc         u32  CRC-32C of bytes 0..48
//! ```

use std::io::Write;
use std::path::{Path, PathBuf};

use super::{sync_dir, Lsn, WalError, WAL_SEGMENT_SIZE};
use crate::storage::BLOCK_SIZE;

pub const CONTROL_FILE: &str = "aiostore.control";
const MAGIC: &[u8; 8] = b"AIOCTRL1";
const SIZE: usize = 52;

/// How the database was left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DbState {
    ShutDown = 1,
    InProduction = 2,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlData {
    pub state: DbState,
    pub checkpoint: Lsn,
    pub redo: Lsn,
    pub time: u64,
}

pub fn path(dir: &Path) -> PathBuf {
    dir.join(CONTROL_FILE)
}

impl ControlData {
    fn encode(&self) -> [u8; SIZE] {
        let mut b = [0u8; SIZE];
        b[0..8].copy_from_slice(MAGIC);
        b[8..12].copy_from_slice(&(self.state as u32).to_le_bytes());
        b[12..16].copy_from_slice(&(BLOCK_SIZE as u32).to_le_bytes());
        b[16..24].copy_from_slice(&WAL_SEGMENT_SIZE.to_le_bytes());
        b[24..32].copy_from_slice(&self.checkpoint.to_le_bytes());
        b[32..40].copy_from_slice(&self.redo.to_le_bytes());
        b[40..48].copy_from_slice(&self.time.to_le_bytes());
        let crc = crc32c::crc32c(&b[0..48]);
        b[48..52].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Writes the control file of `dir` atomically (see the module
    /// comment).
    pub fn write(&self, dir: &Path) -> Result<(), WalError> {
        let target = path(dir);
        let tmp = target.with_extension("tmp");
        let io = |op, source| WalError::Io {
            op,
            path: tmp.clone(),
            source,
        };
        let mut f = std::fs::File::create(&tmp).map_err(|e| io("create", e))?;
        f.write_all(&self.encode()).map_err(|e| io("write", e))?;
        f.sync_all().map_err(|e| io("sync", e))?;
        drop(f);
        std::fs::rename(&tmp, &target).map_err(|e| io("rename", e))?;
        sync_dir(dir)
    }

    /// Reads and checks the control file of `dir`.
    pub fn read(dir: &Path) -> Result<ControlData, WalError> {
        let p = path(dir);
        let bytes = std::fs::read(&p).map_err(|source| WalError::Io {
            op: "read",
            path: p.clone(),
            source,
        })?;
        let damaged = |what: String| WalError::ControlDamaged {
            path: p.clone(),
            what,
        };
        if bytes.len() != SIZE || &bytes[0..8] != MAGIC {
            return Err(damaged(format!(
                "{} bytes, not an aiostore control file",
                bytes.len()
            )));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4"));
        let u64_at = |at: usize| u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8"));
        if crc32c::crc32c(&bytes[0..48]) != u32_at(48) {
            return Err(damaged("incorrect CRC".into()));
        }
        if u32_at(12) as usize != BLOCK_SIZE || u64_at(16) != WAL_SEGMENT_SIZE {
            return Err(damaged(format!(
                "written for block size {} and WAL segment size {}, this build uses {BLOCK_SIZE} and {WAL_SEGMENT_SIZE}",
                u32_at(12),
                u64_at(16)
            )));
        }
        let state = match u32_at(8) {
            1 => DbState::ShutDown,
            2 => DbState::InProduction,
            n => return Err(damaged(format!("unknown state {n}"))),
        };
        Ok(ControlData {
            state,
            checkpoint: u64_at(24),
            redo: u64_at(32),
            time: u64_at(40),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_control_file_that_cannot_be_written_names_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let gone = dir.path().join("gone");
        let c = ControlData {
            state: DbState::InProduction,
            checkpoint: 0x100_0028,
            redo: 0x100_0000,
            time: 17,
        };
        let e = c.write(&gone).unwrap_err().to_string();
        let tmp = path(&gone).with_extension("tmp");
        assert_eq!(
            e,
            format!(
                "could not create file \"{}\": No such file or directory (os error 2)",
                tmp.display()
            )
        );
    }

    #[test]
    fn the_control_file_round_trips_and_a_flipped_bit_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ControlData {
            state: DbState::InProduction,
            checkpoint: 0x100_0028,
            redo: 0x100_0000,
            time: 17,
        };
        c.write(dir.path()).unwrap();
        assert_eq!(ControlData::read(dir.path()).unwrap(), c);
        let p = path(dir.path());
        let mut bytes = std::fs::read(&p).unwrap();
        bytes[30] ^= 4;
        std::fs::write(&p, &bytes).unwrap();
        let err = ControlData::read(dir.path()).unwrap_err().to_string();
        assert!(err.contains("incorrect CRC"), "{err}");
    }
}
