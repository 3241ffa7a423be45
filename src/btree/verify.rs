//! [`Btree::verify`]: the structure's invariants, for tests and for users
//! who suspect damage (`verify_index('name')`, PostgreSQL's amcheck).
//!
//! Level by level from the root down, left to right along the links:
//! each page's level and kind; its tuples in strictly ascending order
//! (the heap TID is part of the key) and below its high key; the left
//! sibling's high key at or below its first tuple; the siblings' links
//! agreeing both ways; each downlink pointing one level down, at a page
//! whose tuples lie between the downlink's key and the next one's; every
//! page of each level reached. A page reachable only through its left
//! sibling (a split whose downlink a crash lost) is counted, not an
//! error. The leaf tuples are returned for the caller to hold against
//! the heap (every visible row has exactly one).

use std::cmp::Ordering;

use crate::buffer::{BufferSession, LockMode};
use crate::heap::tuple::Tid;
use crate::page::line_pointer_count;
use crate::storage::Fork;
use crate::types::Value;

use super::page::{
    decode_tuple, page_tuple, pointer, IndexTuple, Special, FLAG_LEAF, FLAG_ROOT, NO_PAGE,
};
use super::{Btree, BtreeError, IndexDesc, LEVELS_MAX};

/// What [`Btree::verify`] found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct VerifyReport {
    pub levels: u32,
    pub pages: u64,
    /// Pages with no downlink (splits a crash interrupted).
    pub pages_without_downlink: u64,
    /// Every leaf tuple: key and heap TID, in index order.
    pub entries: Vec<(Vec<Value>, Tid)>,
}

/// Orders two decoded tuples by key, then heap TID (minus infinity first).
fn cmp_tuples(idx: &IndexDesc, a: &IndexTuple, b: &IndexTuple) -> Ordering {
    match (a.minus_infinity, b.minus_infinity) {
        (true, true) => return Ordering::Equal,
        (true, false) => return Ordering::Less,
        (false, true) => return Ordering::Greater,
        _ => {}
    }
    idx.spec
        .cmp_values(&a.values, &b.values)
        .then_with(|| a.heap_tid.cmp(&b.heap_tid))
}

impl Btree {
    /// Checks the index's structure (see the module comment). The caller
    /// keeps writers out while it runs.
    pub fn verify(
        &self,
        s: &mut BufferSession,
        idx: &IndexDesc,
    ) -> Result<VerifyReport, BtreeError> {
        let meta = self.meta(s, idx)?;
        let nblocks = s.pool().relation(idx.rel).nblocks(Fork::Main)?;
        let bad = |block: u32, what: String| BtreeError::Damaged {
            index: idx.name.clone(),
            block,
            what,
        };
        if meta.root == 0 || meta.root >= nblocks || meta.level > LEVELS_MAX {
            return Err(bad(
                0,
                format!(
                    "the metapage names root {} at level {}",
                    meta.root, meta.level
                ),
            ));
        }
        let mut report = VerifyReport {
            levels: meta.level + 1,
            ..Default::default()
        };
        // Each level's leftmost page, and the downlinks found on the level
        // above: child → (its key, the next downlink's key or the parent's
        // high key).
        let mut leftmost = meta.root;
        let mut expected: std::collections::HashMap<u32, (IndexTuple, Option<IndexTuple>)> =
            std::collections::HashMap::new();
        for level in (0..=meta.level).rev() {
            let mut block = leftmost;
            let mut prev = NO_PAGE;
            let mut prev_high: Option<IndexTuple> = None;
            let mut next_leftmost = None;
            let mut below = std::collections::HashMap::new();
            let mut visited = std::collections::HashSet::new();
            // A level has fewer pages than the file; one more step finds
            // the end of the level or a loop.
            for _ in 0..=nblocks {
                if block == NO_PAGE {
                    break;
                }
                if block >= nblocks {
                    return Err(bad(
                        prev,
                        format!("links to block {block} past the end ({nblocks})"),
                    ));
                }
                let id = s.read_buffer(idx.rel, Fork::Main, block)?;
                let guard = s.lock_page(id, LockMode::Shared);
                let page = guard.page();
                let checked = (|| -> Result<(u32, Option<IndexTuple>), BtreeError> {
                    let sp = Special::read(page);
                    // Only the metapage's root may be flagged root (it
                    // may lack the flag: a root split whose new root a
                    // crash kept from coming).
                    if sp.flags & FLAG_ROOT != 0 && block != meta.root {
                        return Err(bad(
                            block,
                            format!("flagged root, but the root is {}", meta.root),
                        ));
                    }
                    if sp.level != level || (sp.flags & FLAG_LEAF != 0) != (level == 0) {
                        return Err(bad(
                            block,
                            format!("level {} flags {:#x} on level {level}", sp.level, sp.flags),
                        ));
                    }
                    if sp.prev != prev {
                        return Err(bad(
                            block,
                            format!("left-link {} but reached from {prev}", sp.prev),
                        ));
                    }
                    let count = line_pointer_count(page);
                    let first = sp.first_data();
                    let high = if sp.is_rightmost() {
                        None
                    } else {
                        Some(decode_tuple(&idx.spec, page_tuple(page, 0)?)?)
                    };
                    let mut last: Option<IndexTuple> = None;
                    for i in first..count {
                        let raw = page_tuple(page, i)?;
                        let t = decode_tuple(&idx.spec, raw)?;
                        if t.minus_infinity && (level == 0 || i != first) {
                            return Err(bad(block, format!("minus infinity at line pointer {i}")));
                        }
                        if level > 0 && i == first && !t.minus_infinity {
                            return Err(bad(
                                block,
                                "an internal page's first tuple has a key".into(),
                            ));
                        }
                        if let Some(l) = &last {
                            if cmp_tuples(idx, l, &t) != Ordering::Less {
                                return Err(bad(
                                    block,
                                    format!("line pointer {i} is not above the one before"),
                                ));
                            }
                        }
                        // The first keyed tuple (an internal page's
                        // second) is at or above the left sibling's high
                        // key; the order within the page does the rest.
                        let first_keyed =
                            !t.minus_infinity && last.as_ref().is_none_or(|l| l.minus_infinity);
                        if let (true, Some(ph)) = (first_keyed, &prev_high) {
                            if cmp_tuples(idx, ph, &t) == Ordering::Greater {
                                return Err(bad(
                                    block,
                                    format!(
                                        "line pointer {i} is below the left sibling's high key"
                                    ),
                                ));
                            }
                        }
                        if let Some(h) = &high {
                            if cmp_tuples(idx, &t, h) != Ordering::Less {
                                return Err(bad(
                                    block,
                                    format!("line pointer {i} is not below the high key"),
                                ));
                            }
                        }
                        if let Some((lo, hi)) = expected.get(&block) {
                            if !t.minus_infinity && cmp_tuples(idx, &t, lo) == Ordering::Less {
                                return Err(bad(
                                    block,
                                    format!("line pointer {i} is below its downlink's key"),
                                ));
                            }
                            if let Some(hi) = hi {
                                if cmp_tuples(idx, &t, hi) != Ordering::Less {
                                    return Err(bad(
                                        block,
                                        format!(
                                            "line pointer {i} is not below the next downlink's key"
                                        ),
                                    ));
                                }
                            }
                        }
                        if level == 0 {
                            report.entries.push((t.values.clone(), pointer(raw)));
                        } else {
                            let child = pointer(raw).block;
                            if next_leftmost.is_none() {
                                next_leftmost = Some(child);
                            }
                            if child == 0 || child >= nblocks {
                                return Err(bad(block, format!("downlink to block {child}")));
                            }
                            below.insert(child, (t.clone(), None));
                            if let Some(l) = &last {
                                let lc = l.pointer.block;
                                if let Some(e) = below.get_mut(&lc) {
                                    e.1 = Some(t.clone());
                                }
                            }
                        }
                        last = Some(t);
                    }
                    if let (Some(l), Some(h)) = (&last, &high) {
                        if level > 0 {
                            if let Some(e) = below.get_mut(&l.pointer.block) {
                                e.1 = Some(h.clone());
                            }
                        }
                    }
                    if level > 0 && last.is_none() {
                        return Err(bad(block, "an internal page without downlinks".into()));
                    }
                    Ok((sp.next, high))
                })();
                drop(guard);
                s.release(id);
                let (next, high) = checked.map_err(|e| e.named(idx, block))?;
                if level < meta.level && !expected.contains_key(&block) {
                    report.pages_without_downlink += 1;
                }
                report.pages += 1;
                visited.insert(block);
                prev = block;
                prev_high = high;
                block = next;
            }
            if block != NO_PAGE {
                return Err(bad(prev, "the level's links go round in a loop".into()));
            }
            // Every downlink of the level above points into this level.
            if let Some(child) = expected.keys().find(|c| !visited.contains(c)) {
                return Err(bad(
                    *child,
                    format!(
                        "a downlink of level {} points here, which is not on level {level}",
                        level + 1
                    ),
                ));
            }
            if level > 0 {
                leftmost = next_leftmost
                    .ok_or_else(|| bad(leftmost, "a level without downlinks".into()))?;
            }
            expected = below;
        }
        Ok(report)
    }
}
