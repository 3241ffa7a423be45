//! Reading leaf pages ahead of a scan that moves across many of them
//! (issue 12): the leaves come from a read stream whose callback takes
//! their blocks from a *feed*, filled with the downlinks of the level-1
//! pages above them. A scan holds this only once asked to
//! ([`super::BtreeScan::reading_leaves_ahead`]).
//!
//! # Where the blocks come from
//!
//! A leaf names only its two siblings, so following right-links reads one
//! leaf at a time. Their parent (the level-1 page a descent passed
//! through, which `Btree::find` reports) lists them all in key order with
//! their separators: the feed takes the downlinks from the leaf the scan
//! goes to next on, in the scan's direction, up to the first leaf whose
//! keys all lie past the range's far end (a separator past it going
//! forward; going backward, one whose next separator is), so read-ahead
//! never goes past the range. When the feed runs dry and the range goes
//! on, the next level-1 page (the right sibling forward, the left one
//! backward) is read before the stream is next pulled, and its downlinks
//! fed, one page per refill (the callback pauses the stream meanwhile).
//!
//! # The link chain is the truth
//!
//! The downlinks are a picture taken when their parent was read: a leaf
//! that split since has a new right sibling that picture may lack (its
//! downlink is inserted after the split, and a scan may read the parent
//! in between). So every buffer taken from the stream is checked to be
//! the block the scan's link chain names next (for a backward step, the
//! page `step_left` locks first); a buffer of another block is let go,
//! the stream reset and the feed cleared, and the scan reads that block
//! itself, as without read-ahead, for the rest of the range. A scan never
//! reads a page the chain did not name, so read-ahead cannot make it miss
//! or repeat a key; at worst it stops helping until the next range.
//!
//! # No cost where it cannot help
//!
//! A range reads its first [`LEAF_READ_AHEAD_AFTER_PAGES`] leaves itself:
//! a point lookup, a short range or an `IN` list whose values each lie on
//! a leaf or two never starts the stream. The stream's distances start at
//! 1 and grow only when the scan waits for a read (DESIGN.md §6), so a
//! cached index costs a buffer lookup per leaf, as before.
//!
//! # States
//!
//! Per range: `Idle` (counting the range's leaves), `Active` (the stream
//! is fed this range's leaves) or `Off` (given up until the next range).
//! [`LeafReadAhead::enter`] makes every change and lets the stream's pins
//! go whenever it leaves `Active`.

use std::collections::VecDeque;

use crate::buffer::{BufferId, BufferSession, LockMode};
use crate::page::{line_pointer_count, PageBytes, LINE_POINTER_SIZE};
use crate::storage::{Fork, BLOCK_SIZE};
use crate::stream::{BlockFeed, FedBlocks, ReadStream, StreamFlags, StreamLimits};
use crate::types::Value;

use super::page::{info, page_tuple, pointer, tuple_values, Special, INFO_MINUS_INFINITY, NO_PAGE};
use super::scan::RangeEnd;
use super::{Btree, BtreeError, IndexDesc};

/// Leaves a range reads itself before it reads any ahead: point lookups
/// and ranges of a leaf or two pay nothing for read-ahead.
pub const LEAF_READ_AHEAD_AFTER_PAGES: u64 = 2;
/// Most leaves the read-ahead stream pins. One full combined read
/// (`io_combine_limit`'s default, 16 blocks: a built index's leaves lie
/// in block order) keeps a cold scan's leaf waits to one in 16; more
/// would take pins from the heap's stream for little. An index scan's
/// heap stream leaves this many pins free for it (`FETCH_PINS`).
pub const LEAF_READ_AHEAD_PINS_MAX: usize = 16;
/// Fewest pins worth a stream: with less room than this the scan reads
/// its leaves itself (a pool too small for this session's statement to
/// hold more).
const LEAF_READ_AHEAD_PINS_MIN: usize = 2;
/// Pins the leaf stream leaves to the rest of its statement when it is
/// sized: an index scan's heap page, visibility-map page and heap stream
/// (one pin at least), an index-only scan's leaf kept for its caller, and
/// what an UPDATE or DELETE through the scan pins between pulls.
pub const LEAF_STREAM_PINS_RESERVED: usize = crate::heap::SCAN_PINS_RESERVED + 4;
/// Level-1 pages a start of read-ahead looks through for the downlink of
/// the leaf the scan goes to next: the descent's parent and, as the scan
/// has read [`LEAF_READ_AHEAD_AFTER_PAGES`] leaves since, its sibling.
const PARENT_SEARCH_PAGES_MAX: usize = 2;
/// Most blocks the feed holds: it is refilled only when empty, from one
/// page, which has fewer downlinks than line pointers fit in a page.
const FEED_BLOCKS_MAX: usize = BLOCK_SIZE / LINE_POINTER_SIZE;

/// Read-ahead's state in the current range (see the module comment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Idle,
    Active,
    Off,
}

/// Where a level-1 page's downlinks for a range leave off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Downlinks {
    /// The range may go on past the page: the next level-1 page in the
    /// scan's direction.
    Next(u32),
    /// The range (or the level) ends among the page's downlinks.
    Done,
}

/// A scan's leaf read-ahead: the stream (set up once, on the first range
/// that reads ahead, and reset for each later one), its feed, and where
/// the next downlinks come from.
pub(super) struct LeafReadAhead {
    limits: StreamLimits,
    /// Leaf blocks for the stream, in the scan's order (`done` once the
    /// range has no downlinks beyond those fed).
    feed: std::sync::Arc<parking_lot::Mutex<BlockFeed>>,
    stream: Option<ReadStream<u32, FedBlocks>>,
    state: State,
    /// A level-1 page at or before the scan's leaf in its direction: the
    /// last descent's parent, then the last page whose downlinks were fed.
    parent_hint: Option<u32>,
    /// In `Active`: the level-1 page to feed from when the feed runs dry
    /// (None: every downlink of the range is fed).
    next_parent: Option<u32>,
    /// Leaves the current range has read.
    leaves_in_range: u64,
    scratch: Vec<Value>,
    /// Times the link chain named another leaf than the stream held next,
    /// and read-ahead stopped for the rest of a range.
    pub abandoned: u64,
}

impl LeafReadAhead {
    pub fn new(limits: StreamLimits) -> LeafReadAhead {
        LeafReadAhead {
            limits,
            feed: std::sync::Arc::new(parking_lot::Mutex::new(BlockFeed::default())),
            stream: None,
            state: State::Idle,
            parent_hint: None,
            next_parent: None,
            leaves_in_range: 0,
            scratch: Vec::new(),
            abandoned: 0,
        }
    }

    /// The one place the state changes. Leaving `Active` lets every pin of
    /// the stream go and empties the feed, so that `Idle` and `Off` hold
    /// nothing; `Active` is entered only from `Idle` (a range gives up at
    /// most once).
    fn enter(&mut self, s: &mut BufferSession, to: State) {
        match (self.state, to) {
            (State::Idle, State::Active) => {
                debug_assert!(self.stream.is_some(), "reading ahead without a stream");
            }
            (State::Active, State::Idle | State::Off) => {
                let stream = self
                    .stream
                    .as_mut()
                    .expect("an active read-ahead has a stream");
                stream.reset(s);
                *self.feed.lock() = BlockFeed::default();
                self.next_parent = None;
            }
            (State::Idle | State::Off, State::Idle) | (State::Idle, State::Off) => {}
            (from, to) => panic!("leaf read-ahead cannot go from {from:?} to {to:?}"),
        }
        self.state = to;
        debug_assert!(
            self.state == State::Active
                || (self.feed.lock().blocks.is_empty() && self.next_parent.is_none()),
            "an inactive read-ahead holds blocks"
        );
    }

    /// A new range begins, having read `leaves_read` of its leaves (1:
    /// it starts on the page where the last one ended).
    pub fn new_range(&mut self, s: &mut BufferSession, leaves_read: u64) {
        self.enter(s, State::Idle);
        self.leaves_in_range = leaves_read;
    }

    /// The range's descent passed through level-1 page `parent` (None:
    /// the root is a leaf, and there is nothing to read ahead).
    pub fn descended_through(&mut self, parent: Option<u32>) {
        debug_assert_eq!(self.state, State::Idle);
        self.parent_hint = parent;
    }

    /// The scan read a leaf of the current range.
    pub fn leaf_read(&mut self) {
        self.leaves_in_range += 1;
    }

    /// Lets go of everything read ahead (the scan ended, failed, or its
    /// caller ends it); the stream stays for a rescan. A scan that goes on
    /// may start reading ahead again at its next leaf.
    pub fn release(&mut self, s: &mut BufferSession) {
        self.enter(s, State::Idle);
    }

    /// The buffer of leaf `block`, which the scan's link chain names next,
    /// pinned, if read-ahead has it; None if the scan reads it itself.
    /// Starts read-ahead once the range has read enough leaves, and feeds
    /// the stream when it ran dry.
    pub fn next_leaf(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
        idx: &IndexDesc,
        end: &RangeEnd,
        block: u32,
    ) -> Result<Option<BufferId>, BtreeError> {
        match self.state {
            State::Off => return Ok(None),
            State::Idle => {
                if self.leaves_in_range < LEAF_READ_AHEAD_AFTER_PAGES
                    || !self.start(bt, s, idx, end, block)?
                {
                    return Ok(None);
                }
            }
            State::Active => {
                // Refilled before the stream asks for more rather than
                // when it has paused: at distance 1 (all hits) it asks
                // only when pulled, and would find the feed empty then.
                let fed = !self.feed.lock().blocks.is_empty();
                if let (false, Some(parent)) = (fed, self.next_parent) {
                    self.refill(bt, s, idx, end, parent)?;
                }
            }
        }
        debug_assert_eq!(self.state, State::Active);
        let stream = self
            .stream
            .as_mut()
            .expect("an active read-ahead has a stream");
        match stream.next_buffer(s)? {
            Some((id, streamed)) if streamed == block => {
                s.pool().aio().injections().hit(
                    crate::inject::BTREE_SCAN_READING_AHEAD,
                    crate::inject::HitContext {
                        offset: u64::from(block),
                    },
                );
                Ok(Some(id))
            }
            Some((id, streamed)) => {
                // A leaf split (or the parent did) since its downlinks
                // were fed: the chain goes through a page they did not
                // name. The pages fed after it may still be right, but
                // nothing says so cheaply; the next range starts afresh.
                debug_assert_ne!(streamed, NO_PAGE);
                s.release(id);
                self.abandoned += 1;
                self.enter(s, State::Off);
                Ok(None)
            }
            None => {
                // The downlinks ended before the chain did (the feed is
                // refilled before it runs dry, so the stream did not just
                // pause): a backward scan reads the page past its range's
                // first leaf, having no low key to tell it the range ended
                // there, or a split added a leaf at the range's end.
                self.enter(s, State::Off);
                Ok(None)
            }
        }
    }

    /// Starts reading ahead from `block`: finds its downlink on the
    /// descent's parent (or the page after it), feeds it and those after
    /// it within the range. False if it cannot (no parent: the root is a
    /// leaf; no downlink for `block` yet: it was split off since; too few
    /// pins free), and the range reads its leaves itself.
    fn start(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
        idx: &IndexDesc,
        end: &RangeEnd,
        block: u32,
    ) -> Result<bool, BtreeError> {
        debug_assert_eq!(self.state, State::Idle);
        let Some(mut parent) = self.parent_hint else {
            self.enter(s, State::Off);
            return Ok(false);
        };
        if !self.have_stream(s, idx) {
            self.enter(s, State::Off);
            return Ok(false);
        }
        for _ in 0..PARENT_SEARCH_PAGES_MAX {
            let (found, sp) = self.feed_from_parent(bt, s, idx, end, parent, Some(block))?;
            match found {
                Some(downlinks) => {
                    self.parent_hint = Some(parent);
                    self.enter(s, State::Active);
                    self.fed(downlinks);
                    return Ok(true);
                }
                None => {
                    let next = match end.direction {
                        super::Direction::Forward => sp.next,
                        super::Direction::Backward => sp.prev,
                    };
                    if next == NO_PAGE {
                        break;
                    }
                    parent = next;
                }
            }
        }
        self.enter(s, State::Off);
        Ok(false)
    }

    /// Feeds the downlinks of `parent`, the next level-1 page (the feed
    /// ran dry).
    fn refill(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
        idx: &IndexDesc,
        end: &RangeEnd,
        parent: u32,
    ) -> Result<(), BtreeError> {
        debug_assert_eq!(self.state, State::Active);
        debug_assert_eq!(self.next_parent, Some(parent));
        debug_assert!(self.feed.lock().blocks.is_empty(), "refilled while fed");
        let (downlinks, _) = self.feed_from_parent(bt, s, idx, end, parent, None)?;
        let downlinks = downlinks.expect("a page's downlinks from its first on are found");
        self.parent_hint = Some(parent);
        self.fed(downlinks);
        Ok(())
    }

    /// Queues on the feed the downlinks of level-1 page `parent` that the
    /// range needs, from the one to leaf `from` if given (None, with
    /// nothing queued, if `parent` has none to it), else from its first in
    /// the scan's order; with the page's links. A damaged page leaves
    /// nothing queued.
    fn feed_from_parent(
        &mut self,
        bt: &Btree,
        s: &mut BufferSession,
        idx: &IndexDesc,
        end: &RangeEnd,
        parent: u32,
        from: Option<u32>,
    ) -> Result<(Option<Downlinks>, Special), BtreeError> {
        let page = bt.lock_at(s, idx.rel, parent, LockMode::Shared)?;
        let p = page.guard.page();
        let queued = check_level_one(p).and_then(|()| {
            let at = match from {
                None => None,
                Some(block) => match downlink_to(p, block) {
                    Some(at) => Some(at),
                    None => return Ok(None),
                },
            };
            let mut feed = self.feed.lock();
            collect(p, at, end, &mut feed.blocks, &mut self.scratch).map(Some)
        });
        let sp = Special::read(p);
        page.release(s);
        if queued.is_err() {
            // It may have queued some blocks before the error.
            self.feed.lock().blocks.clear();
        }
        Ok((queued.map_err(|e| e.named(idx, parent))?, sp))
    }

    /// Records where the downlinks just fed leave off, and lets the
    /// stream go on.
    fn fed(&mut self, downlinks: Downlinks) {
        self.next_parent = match downlinks {
            Downlinks::Next(block) => Some(block),
            Downlinks::Done => None,
        };
        let mut feed = self.feed.lock();
        debug_assert!(feed.blocks.len() <= FEED_BLOCKS_MAX);
        feed.done = self.next_parent.is_none();
        self.stream
            .as_mut()
            .expect("an active read-ahead has a stream")
            .resume();
    }

    /// Sets the stream up if it is not yet (once per scan: later ranges
    /// reset it, sized as it was then). False if the session has too few
    /// pins free for one.
    fn have_stream(&mut self, s: &mut BufferSession, idx: &IndexDesc) -> bool {
        if self.stream.is_some() {
            return true;
        }
        // As ReadStream::begin counts: the pins held now, the buffer the
        // scan holds, and what the rest of the statement may take.
        let room = s
            .pool()
            .pin_limit()
            .saturating_sub(s.pinned_count() + 1 + LEAF_STREAM_PINS_RESERVED);
        if room < LEAF_READ_AHEAD_PINS_MIN {
            return false;
        }
        let blocks = BlockFeed::callback(&self.feed);
        // No strategy ring: the leaves are wanted once each, as the
        // scan's own reads of them are. Not sequential: leaves split off
        // later lie at the index's end, and the stream advises the kernel
        // of its jumps.
        let mut stream = ReadStream::begin(
            s,
            idx.rel,
            Fork::Main,
            StreamFlags {
                pins_reserved: LEAF_STREAM_PINS_RESERVED,
                ..Default::default()
            },
            self.limits,
            None,
            blocks,
        );
        stream.limit_pins(room.min(LEAF_READ_AHEAD_PINS_MAX));
        debug_assert!(stream.max_pinned() <= LEAF_READ_AHEAD_PINS_MAX);
        self.stream = Some(stream);
        true
    }
}

/// A damage error unless `page` is on level 1 (a parent of leaves).
fn check_level_one(page: &PageBytes) -> Result<(), BtreeError> {
    let sp = Special::read(page);
    if sp.level != 1 || sp.is_leaf() {
        return Err(BtreeError::damaged(&format!(
            "a page read for its downlinks to leaves is on level {}",
            sp.level
        )));
    }
    Ok(())
}

/// The line pointer of `page`'s downlink to `block`, if it has one.
fn downlink_to(page: &PageBytes, block: u32) -> Option<usize> {
    let first = Special::read(page).first_data();
    (first..line_pointer_count(page))
        .find(|&i| page_tuple(page, i).is_ok_and(|t| pointer(t).block == block))
}

/// Appends to `out` the children of level-1 page `page` that hold keys of
/// the range, in the scan's order: from the downlink at `from` (included
/// whatever its key: the scan goes there), or, for a page reached from its
/// sibling, from its first downlink in the scan's order. Returns where the
/// range's downlinks go on.
fn collect(
    page: &PageBytes,
    from: Option<usize>,
    end: &RangeEnd,
    out: &mut VecDeque<u32>,
    scratch: &mut Vec<Value>,
) -> Result<Downlinks, BtreeError> {
    let sp = Special::read(page);
    let first = sp.first_data();
    let count = line_pointer_count(page);
    if count <= first {
        return Err(BtreeError::damaged("an internal page without data tuples"));
    }
    // Whether the keys at and after (forward) or before (backward) the
    // separator at line pointer `i` all lie past the range's end.
    let mut past = |i: usize| -> Result<bool, BtreeError> {
        let t = page_tuple(page, i)?;
        // Minus infinity bounds nothing: the sibling's high key, checked
        // before the scan came here, did.
        if info(t) & INFO_MINUS_INFINITY != 0 {
            return Ok(false);
        }
        tuple_values(end.spec, t, scratch)?;
        Ok(end.past(scratch))
    };
    let child = |i: usize| -> Result<u32, BtreeError> {
        let block = pointer(page_tuple(page, i)?).block;
        if block == NO_PAGE {
            return Err(BtreeError::damaged("a downlink to the metapage"));
        }
        Ok(block)
    };
    match end.direction {
        super::Direction::Forward => {
            // Child i holds keys from separator i up to separator i + 1.
            let start = from.unwrap_or(first);
            out.push_back(child(start)?);
            for i in start + 1..count {
                if past(i)? {
                    return Ok(Downlinks::Done);
                }
                out.push_back(child(i)?);
            }
            // The high key bounds every key to the right from below.
            if sp.is_rightmost() || past(0)? {
                return Ok(Downlinks::Done);
            }
            Ok(Downlinks::Next(sp.next))
        }
        super::Direction::Backward => {
            // Child i holds keys below separator i + 1 (the last child:
            // below the high key), so it is past the range's start when
            // that separator is.
            let start = match from {
                Some(at) => at,
                None => {
                    if !sp.is_rightmost() && past(0)? {
                        return Ok(Downlinks::Done);
                    }
                    count - 1
                }
            };
            out.push_back(child(start)?);
            for i in (first..start).rev() {
                if past(i + 1)? {
                    return Ok(Downlinks::Done);
                }
                out.push_back(child(i)?);
            }
            if sp.prev == NO_PAGE {
                return Ok(Downlinks::Done);
            }
            Ok(Downlinks::Next(sp.prev))
        }
    }
}
