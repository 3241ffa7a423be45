//! Temporary files of rows: written once, then read back from the start.
//!
//! A file is created with `O_TMPFILE` where the file system allows it (else
//! created and unlinked at once, `tempfile::tempfile_in`), so it has no
//! name: whatever ends the process, nothing is left to clean up. Rows are
//! encoded self-describing (a tag per value), since a spilled row of an
//! expression's results has no table type to decode it by.

use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::SortError;
use crate::types::{Numeric, Value};

/// Bytes a spill file buffers on each side: a write or read system call
/// per this much. Also what one merge input costs in memory.
pub const SPILL_BUFFER_BYTES: usize = 32 * 1024;

/// Values a row read back reserves room for up front: a length word is
/// only trusted as far as the values that follow it are really there.
const DECODE_RESERVE_MAX: usize = 1024;

/// Memory a row takes, as work_mem counts it: the vector, its values,
/// and the text they own.
pub fn row_bytes(row: &[Value]) -> usize {
    std::mem::size_of::<Vec<Value>>()
        + std::mem::size_of_val(row)
        + row
            .iter()
            .map(|v| match v {
                Value::Text(t) | Value::Char(t) => t.capacity(),
                Value::Numeric(x) => x.heap_bytes(),
                _ => 0,
            })
            .sum::<usize>()
}

/// A temporary file being filled with rows.
pub struct SpillWriter {
    dir: PathBuf,
    file: BufWriter<File>,
    rows: u64,
    bytes: u64,
    encoded: Vec<u8>,
}

impl SpillWriter {
    /// A new, nameless file in `dir` (created if missing).
    pub fn create(dir: &Path) -> Result<SpillWriter, SortError> {
        Ok(SpillWriter {
            dir: dir.to_path_buf(),
            file: create_temp_file(dir)?,
            rows: 0,
            bytes: 0,
            encoded: Vec::new(),
        })
    }

    pub fn push(&mut self, row: &[Value]) -> Result<(), SortError> {
        self.push_joined(row, &[])
    }

    /// Writes `first` followed by `then` as one row (hash aggregation
    /// writes a row's group key before it, computed once).
    pub fn push_joined(&mut self, first: &[Value], then: &[Value]) -> Result<(), SortError> {
        self.encoded.clear();
        encode_row(first, then, &mut self.encoded);
        self.file
            .write_all(&self.encoded)
            .map_err(|e| self.failed("write to", e))?;
        self.rows += 1;
        self.bytes += self.encoded.len() as u64;
        Ok(())
    }

    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Bytes written so far.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Ends writing; the rows read back from the first.
    pub fn finish(self) -> Result<SpillReader, SortError> {
        let file = rewound(self.file, &self.dir)?;
        Ok(SpillReader {
            dir: self.dir,
            file: Some(file),
            reader: None,
            left: self.rows,
            rows: self.rows,
        })
    }

    fn failed(&self, action: &'static str, e: std::io::Error) -> SortError {
        SortError::TempFile {
            dir: self.dir.clone(),
            action,
            source: e,
        }
    }
}

/// A new, nameless temporary file in `dir` (created if missing), buffered
/// for writing: what every spill of the sort layer writes to.
pub(crate) fn create_temp_file(dir: &Path) -> Result<BufWriter<File>, SortError> {
    let failed = |e| SortError::TempFile {
        dir: dir.to_path_buf(),
        action: "create",
        source: e,
    };
    std::fs::create_dir_all(dir).map_err(failed)?;
    let file = tempfile::tempfile_in(dir).map_err(failed)?;
    Ok(BufWriter::with_capacity(SPILL_BUFFER_BYTES, file))
}

/// `file` (made by [`create_temp_file`] in `dir`) written out and wound
/// back to its start, to be read.
pub(crate) fn rewound(file: BufWriter<File>, dir: &Path) -> Result<File, SortError> {
    let failed = |action, e| SortError::TempFile {
        dir: dir.to_path_buf(),
        action,
        source: e,
    };
    let mut file = file
        .into_inner()
        .map_err(|e| failed("write to", e.into_error()))?;
    file.seek(SeekFrom::Start(0))
        .map_err(|e| failed("read", e))?;
    Ok(file)
}

/// A finished temporary file, read from its first row to its last.
pub struct SpillReader {
    dir: PathBuf,
    /// The file until its first read, which wraps it in `reader`: its
    /// read buffer is allocated only then, since hash aggregation holds
    /// many spilled partitions while it reads one.
    file: Option<File>,
    reader: Option<BufReader<File>>,
    /// Rows not read yet.
    left: u64,
    /// Rows in the file.
    rows: u64,
}

impl SpillReader {
    /// Starts reading over from the first row (a merge join replays a
    /// spilled group of inner rows for each outer row of its key).
    pub fn rewind(&mut self) -> Result<(), SortError> {
        let failed = |e| SortError::TempFile {
            dir: self.dir.clone(),
            action: "read",
            source: e,
        };
        // Seeking a `BufReader` drops what it had buffered.
        if let Some(reader) = &mut self.reader {
            reader.seek(SeekFrom::Start(0)).map_err(failed)?;
        } else if let Some(file) = &mut self.file {
            file.seek(SeekFrom::Start(0)).map_err(failed)?;
        }
        self.left = self.rows;
        Ok(())
    }

    /// The next row, or None after the last.
    pub fn next_row(&mut self) -> Result<Option<Vec<Value>>, SortError> {
        if self.left == 0 {
            return Ok(None);
        }
        let file = &mut self.file;
        let reader = self.reader.get_or_insert_with(|| {
            let file = file.take().expect("a file until the first read");
            BufReader::with_capacity(SPILL_BUFFER_BYTES, file)
        });
        let row = decode_row(reader).map_err(|e| SortError::TempFile {
            dir: self.dir.clone(),
            action: "read",
            source: e,
        })?;
        self.left -= 1;
        Ok(Some(row))
    }
}

const TAG_NULL: u8 = 0;
const TAG_INTEGER: u8 = 1;
const TAG_BIGINT: u8 = 2;
const TAG_DOUBLE: u8 = 3;
const TAG_TEXT: u8 = 4;
const TAG_FALSE: u8 = 5;
const TAG_TRUE: u8 = 6;
const TAG_DATE: u8 = 7;
const TAG_TIMESTAMP: u8 = 8;
/// A `char(n)` value: text, but decoded as [`Value::Char`] so that it
/// still compares and groups without its padding.
const TAG_CHAR: u8 = 9;
/// A numeric: a u64 length, then its storage form (`Numeric::encode`).
const TAG_NUMERIC: u8 = 10;

fn encode_row(first: &[Value], then: &[Value], out: &mut Vec<u8>) {
    let n = u64::try_from(first.len() + then.len()).expect("a row's length fits 64 bits");
    out.extend_from_slice(&n.to_le_bytes());
    for v in first.iter().chain(then) {
        match v {
            Value::Null => out.push(TAG_NULL),
            Value::Integer(x) => {
                out.push(TAG_INTEGER);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Value::BigInt(x) => {
                out.push(TAG_BIGINT);
                out.extend_from_slice(&x.to_le_bytes());
            }
            Value::Double(x) => {
                out.push(TAG_DOUBLE);
                out.extend_from_slice(&x.to_bits().to_le_bytes());
            }
            Value::Text(t) | Value::Char(t) => {
                out.push(if let Value::Char(_) = v {
                    TAG_CHAR
                } else {
                    TAG_TEXT
                });
                out.extend_from_slice(&(t.len() as u64).to_le_bytes());
                out.extend_from_slice(t.as_bytes());
            }
            Value::Date(d) => {
                out.push(TAG_DATE);
                out.extend_from_slice(&d.to_le_bytes());
            }
            Value::Timestamp(t) => {
                out.push(TAG_TIMESTAMP);
                out.extend_from_slice(&t.to_le_bytes());
            }
            Value::Boolean(b) => out.push(if *b { TAG_TRUE } else { TAG_FALSE }),
            Value::Numeric(x) => {
                out.push(TAG_NUMERIC);
                out.extend_from_slice(&(x.encoded_len() as u64).to_le_bytes());
                x.encode(out);
            }
        }
    }
}

fn decode_row(r: &mut impl Read) -> std::io::Result<Vec<Value>> {
    let corrupt =
        |what: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, what.to_string());
    let n = u64::from_le_bytes(read_array(r)?);
    let mut row = Vec::with_capacity((n as usize).min(DECODE_RESERVE_MAX));
    for _ in 0..n {
        let [tag] = read_array(r)?;
        row.push(match tag {
            TAG_NULL => Value::Null,
            TAG_INTEGER => Value::Integer(i32::from_le_bytes(read_array(r)?)),
            TAG_BIGINT => Value::BigInt(i64::from_le_bytes(read_array(r)?)),
            TAG_DOUBLE => Value::Double(f64::from_bits(u64::from_le_bytes(read_array(r)?))),
            TAG_TEXT | TAG_CHAR => {
                let s = String::from_utf8(read_len_prefixed(r)?)
                    .map_err(|_| corrupt("text that is not UTF-8"))?;
                if tag == TAG_CHAR {
                    Value::Char(s)
                } else {
                    Value::Text(s)
                }
            }
            TAG_DATE => Value::Date(i32::from_le_bytes(read_array(r)?)),
            TAG_TIMESTAMP => Value::Timestamp(i64::from_le_bytes(read_array(r)?)),
            TAG_FALSE => Value::Boolean(false),
            TAG_TRUE => Value::Boolean(true),
            TAG_NUMERIC => Value::Numeric(
                Numeric::decode(&read_len_prefixed(r)?)
                    .ok_or_else(|| corrupt("a damaged numeric"))?,
            ),
            _ => return Err(corrupt("an unknown value tag")),
        });
    }
    Ok(row)
}

/// The bytes after a u64 length, as `encode_row` writes a text or a
/// numeric. Read through `take`, so a damaged length cannot make it
/// reserve more than the file holds.
fn read_len_prefixed(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
    let len = u64::from_le_bytes(read_array(r)?);
    let mut bytes = Vec::new();
    r.take(len).read_to_end(&mut bytes)?;
    if bytes.len() as u64 != len {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(bytes)
}

fn read_array<const N: usize>(r: &mut impl Read) -> std::io::Result<[u8; N]> {
    let mut a = [0u8; N];
    r.read_exact(&mut a)?;
    Ok(a)
}

/// Files this process holds open in `dir`, nameless spill files included
/// (Linux shows them as `dir/#inode (deleted)`): what tests count to see
/// that a statement gave its spill files back, since a directory listing
/// never shows nameless files.
pub fn open_files_in(dir: &Path) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| target.starts_with(dir))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_of_every_kind_read_back_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let rows = vec![
            vec![],
            vec![Value::Null, Value::Integer(-7), Value::BigInt(i64::MIN)],
            vec![
                Value::Double(f64::NAN),
                Value::Double(-0.0),
                Value::Text(String::new()),
                Value::Text("ünïcode, \"quoted\"\n".into()),
                Value::Boolean(true),
                Value::Boolean(false),
                Value::Date(-730_000),
                Value::Date(i32::MAX),
                Value::Timestamp(i64::MIN),
                Value::Timestamp(1_234_567),
                Value::Char("ab  ".into()),
                Value::Numeric(Numeric::parse("-123456789012345678901234567890.50").unwrap()),
                Value::Numeric(Numeric::nan()),
            ],
        ];
        let mut w = SpillWriter::create(&dir.path().join("tmp")).unwrap();
        for row in &rows {
            w.push(row).unwrap();
        }
        assert_eq!(w.rows(), 3);
        let mut r = w.finish().unwrap();
        for row in &rows {
            let back = r.next_row().unwrap().unwrap();
            assert_eq!(back.len(), row.len());
            for (a, b) in back.iter().zip(row) {
                match (a, b) {
                    (Value::Double(x), Value::Double(y)) => assert_eq!(x.to_bits(), y.to_bits()),
                    // Equal numerics may differ in scale: compare the text.
                    (Value::Numeric(x), Value::Numeric(y)) => {
                        assert_eq!(x.to_string(), y.to_string())
                    }
                    _ => assert_eq!(a, b),
                }
            }
        }
        assert!(r.next_row().unwrap().is_none());
        // Nameless: the directory holds nothing, though the file is open.
        let tmp = dir.path().join("tmp");
        assert_eq!(std::fs::read_dir(&tmp).unwrap().count(), 0);
        assert_eq!(open_files_in(&tmp), 1);
        drop(r);
        assert_eq!(open_files_in(&tmp), 0);
    }

    #[test]
    fn rows_of_any_width_and_joined_rows_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let wide: Vec<Value> = (0..70_000).map(Value::Integer).collect();
        let mut w = SpillWriter::create(dir.path()).unwrap();
        w.push(&wide).unwrap();
        w.push_joined(
            &[Value::Text("key".into())],
            &[Value::Null, Value::Integer(1)],
        )
        .unwrap();
        let mut r = w.finish().unwrap();
        assert_eq!(r.next_row().unwrap().unwrap(), wide);
        assert_eq!(
            r.next_row().unwrap().unwrap(),
            [Value::Text("key".into()), Value::Null, Value::Integer(1)]
        );
        assert!(r.next_row().unwrap().is_none());
    }

    #[test]
    fn a_directory_that_cannot_be_made_names_itself() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("plain-file");
        std::fs::write(&file, b"x").unwrap();
        let Err(e) = SpillWriter::create(&file.join("tmp")) else {
            panic!("created a spill file under a plain file");
        };
        let text = e.to_string();
        assert!(
            text.contains("could not create a temporary file in") && text.contains("plain-file"),
            "{text}"
        );
    }
}
