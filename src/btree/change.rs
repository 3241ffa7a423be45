//! The one path by which B-tree pages change, and where their WAL records
//! are made (as `heap::apply_logged` is for heap pages).
//!
//! A change to one page that replay can repeat is a [`BtreeChange`]:
//! applied by [`apply`], logged by [`apply_logged`] and repeated by
//! [`redo`]. A change that rewrites pages (the halves of a split, a new
//! root, pages of a build, a new metapage) is made on the pages directly
//! and logged by [`log_rewrite`] with each page's image, which replay
//! restores: splitting again during replay would have to decide the split
//! point the same way, an image cannot differ. (PostgreSQL logs a split's
//! right half and the left half's new items instead of images; ours costs
//! about 16 KiB of WAL per split, one split in a page's worth of inserts.)

use crate::page::{delete_items, insert_item_at, page_lsn, set_page_lsn, PageBytes};
use crate::storage::Fork;
use crate::wal::{BlockTag, Lsn, PageRef, Rmgr, Wal, WalError};

/// A change to one B-tree page.
#[derive(Debug, Clone, PartialEq)]
pub enum BtreeChange<'a> {
    /// Inserts `tuple` with line pointer `index`.
    Insert { index: u16, tuple: &'a [u8] },
    /// Deletes the tuples of these line pointers (vacuum), in ascending
    /// order.
    Delete { indexes: Vec<u16> },
}

/// `info` of each record kind.
pub const BTREE_INSERT: u8 = 0;
pub const BTREE_DELETE: u8 = 1;
/// 2 was a metapage change; the metapage changes only with a new root,
/// logged as images.
/// Pages rewritten whole ([`log_rewrite`]): a split.
pub const BTREE_SPLIT: u8 = 3;
/// A new root over the old one and the page it split into.
pub const BTREE_NEW_ROOT: u8 = 4;
/// Pages written by a build, and an empty index's metapage and root.
pub const BTREE_BUILD: u8 = 5;

impl BtreeChange<'_> {
    fn info(&self) -> u8 {
        match self {
            BtreeChange::Insert { .. } => BTREE_INSERT,
            BtreeChange::Delete { .. } => BTREE_DELETE,
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut d = Vec::new();
        match self {
            BtreeChange::Insert { index, tuple } => {
                d.extend_from_slice(&index.to_le_bytes());
                d.extend_from_slice(tuple);
            }
            BtreeChange::Delete { indexes } => {
                d.extend_from_slice(&(indexes.len() as u32).to_le_bytes());
                for i in indexes {
                    d.extend_from_slice(&i.to_le_bytes());
                }
            }
        }
        d
    }

    fn decode(info: u8, d: &[u8]) -> Result<BtreeChange<'_>, &'static str> {
        let u16_at = |at: usize| -> Result<u16, &'static str> {
            d.get(at..at + 2)
                .map(|b| u16::from_le_bytes([b[0], b[1]]))
                .ok_or("B-tree record shorter than its data")
        };
        let u32_at = |at: usize| -> Result<u32, &'static str> {
            d.get(at..at + 4)
                .map(|b| u32::from_le_bytes(b.try_into().expect("4")))
                .ok_or("B-tree record shorter than its data")
        };
        Ok(match info {
            BTREE_INSERT => BtreeChange::Insert {
                index: u16_at(0)?,
                tuple: &d[2..],
            },
            BTREE_DELETE => {
                let n = u32_at(0)? as usize;
                let bytes = d
                    .get(4..4 + 2 * n)
                    .ok_or("B-tree delete record shorter than its list")?;
                BtreeChange::Delete {
                    indexes: bytes
                        .chunks_exact(2)
                        .map(|c| u16::from_le_bytes([c[0], c[1]]))
                        .collect(),
                }
            }
            _ => return Err("B-tree record replay needs the page's image"),
        })
    }
}

/// Makes `change` on `page`. Returns false if it cannot be made (an
/// insert that does not fit, a line pointer past the end): the caller
/// checked, so replay reports it as damage.
pub fn apply(page: &mut PageBytes, change: &BtreeChange) -> bool {
    match change {
        BtreeChange::Insert { index, tuple } => {
            *index as usize <= crate::page::line_pointer_count(page)
                && insert_item_at(page, *index as usize, tuple)
        }
        BtreeChange::Delete { indexes } => {
            debug_assert!(indexes.windows(2).all(|w| w[0] < w[1]), "unsorted delete");
            let n = indexes.len();
            let mut next = 0;
            let removed = delete_items(page, |i| {
                if next < n && indexes[next] as usize == i {
                    next += 1;
                    true
                } else {
                    false
                }
            });
            removed == n
        }
    }
}

/// Makes `change` on block `block` of index `rel` and logs it, stamping
/// the page with the record's end. The caller holds the page's exclusive
/// content lock and has checked that the change can be made.
pub fn apply_logged(
    wal: &Wal,
    page: &mut PageBytes,
    rel: u32,
    block: u32,
    change: &BtreeChange,
) -> Result<Lsn, WalError> {
    let old_lsn = page_lsn(page);
    let made = apply(page, change);
    assert!(
        made,
        "B-tree change {change:?} on block {block} of {rel} not made"
    );
    let lsn = wal.insert(
        Rmgr::Btree,
        change.info(),
        0,
        &[PageRef {
            tag: BlockTag {
                rel,
                fork: Fork::Main,
                block,
            },
            page,
            old_lsn,
            force_image: false,
        }],
        &change.encode(),
    )?;
    set_page_lsn(page, lsn);
    Ok(lsn)
}

/// Logs pages of index `rel` rewritten whole (`info`: a split, a new root,
/// a build) as one record with each page's image, and stamps them with
/// its end. The caller holds each page's exclusive content lock.
pub fn log_rewrite(
    wal: &Wal,
    rel: u32,
    info: u8,
    pages: &mut [(u32, &mut PageBytes)],
) -> Result<Lsn, WalError> {
    let lsn = {
        let refs: Vec<PageRef> = pages
            .iter()
            .map(|(block, page)| PageRef {
                tag: BlockTag {
                    rel,
                    fork: Fork::Main,
                    block: *block,
                },
                page,
                old_lsn: page_lsn(page),
                force_image: true,
            })
            .collect();
        wal.insert(Rmgr::Btree, info, 0, &refs, &[])?
    };
    for (_, page) in pages.iter_mut() {
        set_page_lsn(page, lsn);
    }
    Ok(lsn)
}

/// Repeats a logged change during replay (records with images never get
/// here: replay restores the image).
pub fn redo(page: &mut PageBytes, info: u8, data: &[u8]) -> Result<(), &'static str> {
    let change = BtreeChange::decode(info, data)?;
    if apply(page, &change) {
        Ok(())
    } else {
        Err("B-tree change does not fit its page")
    }
}

/// The name of a record kind, for `waldump`.
pub fn record_kind_name(info: u8) -> &'static str {
    match info {
        BTREE_INSERT => "INSERT",
        BTREE_DELETE => "DELETE",
        BTREE_SPLIT => "SPLIT",
        BTREE_NEW_ROOT => "NEW_ROOT",
        BTREE_BUILD => "BUILD",
        _ => "UNKNOWN",
    }
}

/// What a record says, for `waldump`.
pub fn describe(info: u8, data: &[u8]) -> String {
    match BtreeChange::decode(info, data) {
        Ok(BtreeChange::Insert { index, tuple }) => {
            format!("off {index}, {} bytes", tuple.len())
        }
        Ok(BtreeChange::Delete { indexes }) => format!("{} tuples", indexes.len()),
        Err(_) => String::new(),
    }
}
