/*
 * pg_checksum.c - plain C baseline of PostgreSQL's data page checksum
 * (FNV-1a-derived, 32 parallel lanes), written from the algorithm's
 * description for aiostore speed comparisons.
 *
 *   pg_checksum --verify FILE   check every 8192-byte page in FILE
 *   pg_checksum --bench MIB     checksum MIB MiB of random pages for ~2 s
 *                               (result line on stdout, checksum sum on stderr)
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE_SIZE 8192u
#define LANES 32u
#define ROWS (PAGE_SIZE / (4u * LANES)) /* 64 */
#define FNV_PRIME 16777619u
#define CKSUM_OFFSET 8u /* pd_checksum: u16 at bytes 8..10 */

static const uint32_t lane_seed[LANES] = {
    0x5B1F36E9, 0xB8525960, 0x02AB50AA, 0x1DE66D2A,
    0x79FF467A, 0x9BB9F8A3, 0x217E7CD2, 0x83E13D2C,
    0xF8D4474F, 0xE39EB970, 0x42C6AE16, 0x993216FA,
    0x7B093B5D, 0x98DAFF3C, 0xF718902A, 0x0B1C9CDB,
    0xE58F764B, 0x187636BC, 0x5D7B3BB1, 0xE73DE7DE,
    0x92BEC979, 0xCCA6C0B2, 0x304A0979, 0x85AA43D4,
    0x783125BB, 0x6CA8EAA2, 0xE407EAC6, 0x4B5CFC3E,
    0x9FBF8C76, 0x15CA20BE, 0xF2CA9FD3, 0x959BD756,
};

static inline uint32_t mix(uint32_t sum, uint32_t value)
{
    uint32_t t = sum ^ value;
    return t * FNV_PRIME ^ (t >> 17);
}

/* The raw 32-lane hash over a page whose checksum field is already zero,
 * reading the page in place as PostgreSQL does (little-endian host). */
static uint32_t page_hash(const unsigned char *page)
{
    const uint32_t (*words)[LANES] = (const uint32_t (*)[LANES])(const void *)page;
    uint32_t sums[LANES];
    memcpy(sums, lane_seed, sizeof sums);
    for (unsigned i = 0; i < ROWS; i++)
        for (unsigned j = 0; j < LANES; j++)
            sums[j] = mix(sums[j], words[i][j]);
    for (unsigned r = 0; r < 2; r++)
        for (unsigned j = 0; j < LANES; j++)
            sums[j] = mix(sums[j], 0);
    uint32_t x = 0;
    for (unsigned j = 0; j < LANES; j++)
        x ^= sums[j];
    return x;
}

/* Full page checksum; pd_checksum is zeroed while hashing and restored
 * afterwards, as PostgreSQL's pg_checksum_page does. */
static uint16_t pg_page_checksum(unsigned char *page, uint32_t blkno)
{
    unsigned char saved[2] = {page[CKSUM_OFFSET], page[CKSUM_OFFSET + 1]};
    page[CKSUM_OFFSET] = 0;
    page[CKSUM_OFFSET + 1] = 0;
    uint32_t x = page_hash(page) ^ blkno;
    page[CKSUM_OFFSET] = saved[0];
    page[CKSUM_OFFSET + 1] = saved[1];
    return (uint16_t)((x % 65535u) + 1u);
}

static uint16_t stored_checksum(const unsigned char *page)
{
    return (uint16_t)(page[CKSUM_OFFSET] | (page[CKSUM_OFFSET + 1] << 8));
}

static int do_verify(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return 2;
    }
    unsigned char page[PAGE_SIZE];
    uint32_t blk = 0;
    int bad = 0;
    size_t n;
    while ((n = fread(page, 1, PAGE_SIZE, f)) == PAGE_SIZE) {
        uint16_t calc = pg_page_checksum(page, blk);
        uint16_t stored = stored_checksum(page);
        printf("block %u: computed=0x%04X stored=0x%04X %s\n", blk, calc,
               stored, calc == stored ? "OK" : "MISMATCH");
        if (calc != stored)
            bad++;
        blk++;
    }
    fclose(f);
    if (n != 0) {
        fprintf(stderr, "%s: trailing partial page of %zu bytes\n", path, n);
        return 2;
    }
    if (blk == 0) {
        fprintf(stderr, "%s: no pages\n", path);
        return 2;
    }
    printf("%u blocks, %d mismatches\n", blk, bad);
    return bad ? 1 : 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int do_bench(long mib)
{
    if (mib <= 0) {
        fprintf(stderr, "bad MIB\n");
        return 2;
    }
    size_t bytes = (size_t)mib << 20;
    size_t pages = bytes / PAGE_SIZE;
    unsigned char *buf = aligned_alloc(64, bytes);
    if (!buf) {
        perror("alloc");
        return 2;
    }
    uint64_t s = 0x9E3779B97F4A7C15ull; /* xorshift64* fill */
    for (size_t i = 0; i < bytes; i += 8) {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        uint64_t v = s * 0x2545F4914F6CDD1Dull;
        memcpy(buf + i, &v, 8);
    }

    uint64_t acc = 0; /* sum of all checksums: keeps the work observable */
    size_t total_pages = 0;
    double t0 = now_s(), t;
    do {
        for (size_t p = 0; p < pages; p++)
            acc += pg_page_checksum(buf + p * PAGE_SIZE, (uint32_t)p);
        total_pages += pages;
        t = now_s() - t0;
    } while (t < 2.0);

    double gb_s = (double)total_pages * PAGE_SIZE / t / 1e9;
    printf("c_checksum gb_s=%.3f mib=%ld pages=%zu seconds=%.3f\n", gb_s, mib,
           total_pages, t);
    fprintf(stderr, "sum_of_checksums=%llu\n", (unsigned long long)acc);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--verify") == 0)
        return do_verify(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--bench") == 0)
        return do_bench(strtol(argv[2], NULL, 10));
    fprintf(stderr, "usage: %s --verify FILE | --bench MIB\n", argv[0]);
    return 2;
}
