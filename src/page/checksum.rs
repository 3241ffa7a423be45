//! PostgreSQL's page checksum (`src/include/storage/checksum_impl.h`),
//! reimplemented so that `pg_checksums` and we agree on every page.
//!
//! The page is seen as 64 rows of 32 little-endian u32 words. 32 running
//! sums, one per column ("lane"), are mixed with an FNV-1a-like step; two
//! extra rounds of zeros spread the last row's bits. The lanes are
//! independent, so the inner loop is 32 lanes wide: on x86-64 an AVX-512 or
//! AVX2 version is chosen at run time (the baseline target, SSE2, has no
//! 32-bit vector multiply), with a portable version elsewhere. With direct I/O this loop is on the
//! critical path of every read (see reference/aio-v2-checksums-2025.txt).

use crate::storage::BLOCK_SIZE;

const N_SUMS: usize = 32;
const FNV_PRIME: u32 = 16_777_619;
const ROW_BYTES: usize = N_SUMS * 4;
const ROWS: usize = BLOCK_SIZE / ROW_BYTES;

/// Byte offset of `pd_checksum` in the page header. It lies in the low half
/// of the third word of row 0, which is masked while summing instead of
/// copying the page to zero it.
pub const CHECKSUM_OFFSET: usize = 8;
const CHECKSUM_WORD: usize = CHECKSUM_OFFSET / 4;
const CHECKSUM_WORD_MASK: u32 = 0xFFFF_0000;

const BASE_OFFSETS: [u32; N_SUMS] = [
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A, 0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA, 0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE, 0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E, 0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
];

#[inline(always)]
fn mix(sum: u32, value: u32) -> u32 {
    let t = sum ^ value;
    t.wrapping_mul(FNV_PRIME) ^ (t >> 17)
}

#[inline(always)]
fn load_row(page: &[u8; BLOCK_SIZE], row: usize) -> [u32; N_SUMS] {
    let bytes = &page[row * ROW_BYTES..(row + 1) * ROW_BYTES];
    let mut words = [0u32; N_SUMS];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(4)) {
        *word = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
    }
    words
}

#[inline(always)]
fn mix_row(sums: &mut [u32; N_SUMS], words: &[u32; N_SUMS]) {
    for (sum, &word) in sums.iter_mut().zip(words) {
        *sum = mix(*sum, word);
    }
}

/// The 32-bit block hash with `pd_checksum` taken as zero.
#[inline(always)]
fn checksum_block_generic(page: &[u8; BLOCK_SIZE]) -> u32 {
    let mut sums = BASE_OFFSETS;
    let mut first = load_row(page, 0);
    first[CHECKSUM_WORD] &= CHECKSUM_WORD_MASK;
    mix_row(&mut sums, &first);
    for row in 1..ROWS {
        mix_row(&mut sums, &load_row(page, row));
    }
    for _ in 0..2 {
        mix_row(&mut sums, &[0; N_SUMS]);
    }
    sums.iter().fold(0, |acc, &s| acc ^ s)
}

/// The same hash with AVX2 intrinsics: the 32 lanes are four 8-lane
/// registers. Written out because LLVM's own vectorisation of the generic
/// loop shuffles every row (measured about 15% slower than C).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn checksum_block_avx2(page: &[u8; BLOCK_SIZE]) -> u32 {
    use std::arch::x86_64::*;
    let prime = _mm256_set1_epi32(FNV_PRIME as i32);
    let mix = |sum: __m256i, value: __m256i| {
        let t = _mm256_xor_si256(sum, value);
        _mm256_xor_si256(_mm256_mullo_epi32(t, prime), _mm256_srli_epi32::<17>(t))
    };
    let ptr = page.as_ptr() as *const __m256i;
    // SAFETY: BASE_OFFSETS holds 32 u32s, four 32-byte vectors; unaligned
    // loads are used throughout.
    let base = BASE_OFFSETS.as_ptr() as *const __m256i;
    let mut sums: [__m256i; 4] =
        std::array::from_fn(|k| unsafe { _mm256_loadu_si256(base.add(k)) });
    let mut mask = [u32::MAX; 8];
    mask[CHECKSUM_WORD] = CHECKSUM_WORD_MASK;
    // SAFETY: mask holds 8 u32s.
    let mask = unsafe { _mm256_loadu_si256(mask.as_ptr() as *const __m256i) };
    for row in 0..ROWS {
        for (k, sum) in sums.iter_mut().enumerate() {
            // SAFETY: row * 4 + k < 256 vectors of 32 bytes = 8192 bytes.
            let mut value = unsafe { _mm256_loadu_si256(ptr.add(row * 4 + k)) };
            if row == 0 && k == 0 {
                value = _mm256_and_si256(value, mask);
            }
            *sum = mix(*sum, value);
        }
    }
    let zero = _mm256_setzero_si256();
    for _ in 0..2 {
        for sum in sums.iter_mut() {
            *sum = mix(*sum, zero);
        }
    }
    let x = _mm256_xor_si256(
        _mm256_xor_si256(sums[0], sums[1]),
        _mm256_xor_si256(sums[2], sums[3]),
    );
    let mut lanes = [0u32; 8];
    // SAFETY: lanes holds 8 u32s.
    unsafe { _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, x) };
    lanes.iter().fold(0, |acc, &l| acc ^ l)
}

/// The same hash with AVX-512: two 16-lane registers.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn checksum_block_avx512(page: &[u8; BLOCK_SIZE]) -> u32 {
    use std::arch::x86_64::*;
    let prime = _mm512_set1_epi32(FNV_PRIME as i32);
    let mix = |sum: __m512i, value: __m512i| {
        let t = _mm512_xor_si512(sum, value);
        _mm512_xor_si512(_mm512_mullo_epi32(t, prime), _mm512_srli_epi32::<17>(t))
    };
    let ptr = page.as_ptr() as *const __m512i;
    let base = BASE_OFFSETS.as_ptr() as *const __m512i;
    // SAFETY: BASE_OFFSETS holds two 64-byte vectors; loads are unaligned.
    let mut sums: [__m512i; 2] =
        std::array::from_fn(|k| unsafe { _mm512_loadu_si512(base.add(k)) });
    let mut mask = [u32::MAX; 16];
    mask[CHECKSUM_WORD] = CHECKSUM_WORD_MASK;
    // SAFETY: mask holds 16 u32s.
    let mask = unsafe { _mm512_loadu_si512(mask.as_ptr() as *const __m512i) };
    for row in 0..ROWS {
        for (k, sum) in sums.iter_mut().enumerate() {
            // SAFETY: row * 2 + k < 128 vectors of 64 bytes = 8192 bytes.
            let mut value = unsafe { _mm512_loadu_si512(ptr.add(row * 2 + k)) };
            if row == 0 && k == 0 {
                value = _mm512_and_si512(value, mask);
            }
            *sum = mix(*sum, value);
        }
    }
    let zero = _mm512_setzero_si512();
    for _ in 0..2 {
        for sum in sums.iter_mut() {
            *sum = mix(*sum, zero);
        }
    }
    let x = _mm512_xor_si512(sums[0], sums[1]);
    let mut lanes = [0u32; 16];
    // SAFETY: lanes holds 16 u32s.
    unsafe { _mm512_storeu_si512(lanes.as_mut_ptr() as *mut __m512i, x) };
    lanes.iter().fold(0, |acc, &l| acc ^ l)
}

fn checksum_block(page: &[u8; BLOCK_SIZE]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU supports AVX-512F, checked just above.
            return unsafe { checksum_block_avx512(page) };
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2, checked just above.
            return unsafe { checksum_block_avx2(page) };
        }
    }
    checksum_block_generic(page)
}

/// The checksum PostgreSQL stores in `pd_checksum` for `page` at block
/// number `blkno` of its relation fork. Never 0, so that 0 can mean "no
/// checksum".
pub fn page_checksum(page: &[u8; BLOCK_SIZE], blkno: u32) -> u16 {
    let hash = checksum_block(page) ^ blkno;
    ((hash % 65535) + 1) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Three blocks of a PostgreSQL 15 heap written with data checksums; see
    /// tests/fixtures/README.md for how they were made.
    const PG15_HEAP: &[u8] = include_bytes!("../../tests/fixtures/pg15_heap_3blocks.bin");

    fn stored(page: &[u8]) -> u16 {
        u16::from_le_bytes([page[CHECKSUM_OFFSET], page[CHECKSUM_OFFSET + 1]])
    }

    #[test]
    fn checksums_match_pages_written_by_postgresql() {
        let expected = [0xC729u16, 0x05AF, 0x8F2C];
        for (blkno, page) in PG15_HEAP.chunks_exact(BLOCK_SIZE).enumerate() {
            let page: &[u8; BLOCK_SIZE] = page.try_into().unwrap();
            assert_eq!(stored(page), expected[blkno]);
            assert_eq!(
                page_checksum(page, blkno as u32),
                expected[blkno],
                "block {blkno}"
            );
        }
    }

    #[test]
    fn checksum_depends_on_block_number_and_contents_but_not_its_own_field() {
        let mut page: [u8; BLOCK_SIZE] = PG15_HEAP[..BLOCK_SIZE].try_into().unwrap();
        let original = page_checksum(&page, 0);
        assert_ne!(page_checksum(&page, 1), original);
        page[CHECKSUM_OFFSET] ^= 0xFF;
        assert_eq!(page_checksum(&page, 0), original);
        page[4000] ^= 1;
        assert_ne!(page_checksum(&page, 0), original);
    }

    #[test]
    fn every_vectorised_version_agrees_with_the_generic_one() {
        let mut page = [0u8; BLOCK_SIZE];
        let mut x = 0x1234_5678u32;
        for b in page.iter_mut() {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            *b = x as u8;
        }
        let expected = checksum_block_generic(&page);
        assert_eq!(checksum_block(&page), expected);
        #[cfg(target_arch = "x86_64")]
        {
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: feature checked.
                assert_eq!(unsafe { checksum_block_avx2(&page) }, expected);
            }
            if std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: feature checked.
                assert_eq!(unsafe { checksum_block_avx512(&page) }, expected);
            }
        }
    }
}
