//! The heap side of a bitmap heap scan: the pages of a [`TidBitmap`] read
//! in block order through a read stream, each page's tuples that a
//! snapshot sees handed out as a sequential scan hands them out.
//!
//! The stream's callback takes the block numbers from the bitmap's
//! iterator and puts each page's entry (its exact line pointers, or
//! lossy) in the buffer's per-buffer data, so the stream combines
//! neighbouring blocks into one I/O and looks ahead as far as its
//! distance allows; the consumer gets each page back with what to read on
//! it. Visibility is decided by the same loop as the sequential scan's
//! ([`super::visit_page_tuples`]), with the same all-visible shortcut.

use crate::buffer::{BufferId, BufferSession};
use crate::storage::Fork;
use crate::stream::{Next, ReadStream, StreamFlags, StreamLimits, StreamStats};
use crate::tidbitmap::{BitmapPage, PageTids, TidBitmap};
use crate::txn::Snapshot;

use super::{
    line_pointer_count, visit_page_chains, visit_page_tuples, Heap, HeapError, HeapTable,
    ScanControl, Tid, Visibility, SCAN_PINS_RESERVED,
};

/// The bitmap's pages, as the stream's callback hands them on.
type BitmapBlocks = Box<dyn FnMut(&mut Option<BitmapPage>) -> Next + Send>;

/// Figures of a bitmap heap scan, for EXPLAIN.
#[derive(Debug, Clone, Copy, Default)]
pub struct BitmapScanStats {
    /// Pages read with exact line pointers, and lossy pages read whole
    /// (EXPLAIN's `Heap Blocks: exact=… lossy=…`).
    pub exact_pages: u64,
    pub lossy_pages: u64,
    pub stream: StreamStats,
}

impl BitmapScanStats {
    pub fn add(&mut self, other: &BitmapScanStats) {
        self.exact_pages += other.exact_pages;
        self.lossy_pages += other.lossy_pages;
        self.stream.add(&other.stream);
    }
}

/// A page the caller stopped in the middle of: still pinned, with what
/// to read on it and the line pointer to go on from.
struct Paused {
    buffer: BufferId,
    page: BitmapPage,
    from: usize,
}

/// The pages of a bitmap read in block order (see the module comment),
/// pulled a page at a time.
pub struct HeapBitmapScan {
    rel: u32,
    stream: ReadStream<Option<BitmapPage>, BitmapBlocks>,
    paused: Option<Paused>,
    exact_pages: u64,
    lossy_pages: u64,
}

impl HeapBitmapScan {
    /// Begins reading the pages of `bitmap` of `table`. Blocks at or past
    /// the table's end now are left out: vacuum truncated them after the
    /// index gave their TIDs, so they held only tuples dead to everyone.
    pub fn begin(
        s: &mut BufferSession,
        table: &HeapTable,
        bitmap: TidBitmap,
        limits: StreamLimits,
    ) -> Result<HeapBitmapScan, HeapError> {
        let nblocks = s.pool().relation(table.rel).nblocks(Fork::Main)?;
        let mut pages = bitmap.into_pages();
        let blocks: BitmapBlocks = Box::new(move |data: &mut Option<BitmapPage>| {
            match pages.next() {
                // Ascending: every page after this one is past the end too.
                Some(page) if page.block < nblocks => {
                    let block = page.block;
                    *data = Some(page);
                    Next::Block(block)
                }
                _ => Next::End,
            }
        });
        // No strategy ring: a bitmap scan reads the pages it needs, not a
        // table's worth (PostgreSQL's bitmap heap scan reads through the
        // pool as any other fetch does). Not sequential: the blocks jump,
        // and the stream advises the kernel of them.
        let stream = ReadStream::begin(
            s,
            table.rel,
            Fork::Main,
            StreamFlags {
                pins_reserved: SCAN_PINS_RESERVED,
                ..Default::default()
            },
            limits,
            None,
            blocks,
        );
        Ok(HeapBitmapScan {
            rel: table.rel,
            stream,
            paused: None,
            exact_pages: 0,
            lossy_pages: 0,
        })
    }

    /// Calls `f` with each tuple of the next page (or of the page it
    /// paused in, from where it paused) that `snap` sees: the page's
    /// exact line pointers, or every tuple of a lossy page. `f` runs under
    /// the page's shared content lock: it must copy what it needs and not
    /// touch the pool. When `f` answers [`ScanControl::Stop`] the scan
    /// pauses after that tuple, keeping the page pinned. Returns false
    /// once the bitmap is done (as [`super::HeapScan::next_page`] does).
    pub fn next_page(
        &mut self,
        heap: &Heap,
        s: &mut BufferSession,
        snap: &Snapshot,
        f: impl FnMut(Tid, &[u8]) -> ScanControl,
    ) -> Result<bool, HeapError> {
        let Paused { buffer, page, from } = match self.paused.take() {
            Some(paused) => paused,
            None => match self.stream.next_buffer(s)? {
                Some((buffer, page)) => {
                    let page =
                        page.expect("the bitmap stream's callback fills every buffer's page");
                    match page.tids {
                        PageTids::Exact(_) => self.exact_pages += 1,
                        PageTids::Lossy => self.lossy_pages += 1,
                    }
                    Paused {
                        buffer,
                        page,
                        from: 0,
                    }
                }
                None => return Ok(false),
            },
        };
        debug_assert_eq!(
            s.pool().tag(buffer).map(|t| (t.rel, t.block)),
            Some((self.rel, page.block)),
            "a bitmap scan's stream read another page"
        );
        let mut visibility = Visibility::new(&heap.txn, snap);
        let keep = |h: &super::TupleHeader| visibility.is_visible(h);
        let stopped_after = s.with_page(buffer, |p| match &page.tids {
            // An index's TIDs: roots of HOT chains, whose versions a
            // lossy page's every tuple covers anyway.
            PageTids::Exact(offsets) => visit_page_chains(
                p,
                page.block,
                // Ascending: a resumed page starts past the offsets done.
                offsets[offsets.partition_point(|&o| usize::from(o) < from)..]
                    .iter()
                    .map(|&o| usize::from(o)),
                keep,
                f,
            ),
            PageTids::Lossy => {
                visit_page_tuples(p, page.block, from..line_pointer_count(p), keep, f)
            }
        });
        match stopped_after {
            Some(index) => {
                self.paused = Some(Paused {
                    buffer,
                    page,
                    from: index + 1,
                })
            }
            None => s.release(buffer),
        }
        Ok(true)
    }

    /// Ends the scan (whatever its stream read ahead is given back) and
    /// returns its figures.
    pub fn end(mut self, s: &mut BufferSession) -> BitmapScanStats {
        if let Some(paused) = self.paused.take() {
            s.release(paused.buffer);
        }
        BitmapScanStats {
            exact_pages: self.exact_pages,
            lossy_pages: self.lossy_pages,
            stream: self.stream.end(s),
        }
    }
}
