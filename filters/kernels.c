/* The compiled loops of the curation stages: MinHash shingles and SHA-1 (filters/minhash_kernel.py), Gopher's
 * repetition counts (filters/repetition_kernels.py), text normalization (filters/normalization_kernels.py), benchmark
 * n-gram hashes (filters/benchmark_index_kernels.py), union-find and Jaccard (curation/dedup_kernels.py).
 *
 * Plain C99 over arrays: built once per machine by filters/compiled_kernels.py with the system's C compiler and called
 * through ctypes, so a worker loads ~100 KiB instead of a JIT compiler. Each function's Python wrapper documents what
 * it computes; the comments here say how. Outputs whose size depends on the data are sized by the caller from a bound
 * (or by a first call that counts), never allocated here, except scratch that is freed before returning.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define LANES 32

static inline uint32_t rotl32(uint32_t x, int n) { return (x << n) | (x >> (32 - n)); }

static inline uint32_t byte_swap32(uint32_t x) {
    return ((x & 0xFFu) << 24) | ((x & 0xFF00u) << 8) | ((x >> 8) & 0xFF00u) | (x >> 24);
}

static const uint32_t SHA1_INIT[5] = {0x67452301u, 0xEFCDAB89u, 0x98BADCFEu, 0x10325476u, 0xC3D2E1F0u};
static const uint32_t SHA1_K[4] = {0x5A827999u, 0x6ED9EBA1u, 0x8F1BBCDCu, 0xCA62C1D6u};

/* SHA-1 of any length, one message at a time: the first digest word, read little-endian as datasketch reads it. */
static uint32_t sha1_hash32_one(const uint8_t *message, int64_t length) {
    int64_t total = ((length + 8) / 64 + 1) * 64;
    uint64_t bits = (uint64_t)length * 8;
    uint32_t h[5], w[80];
    memcpy(h, SHA1_INIT, sizeof h);
    for (int64_t block = 0; block < total; block += 64) {
        for (int i = 0; i < 16; i++) {
            uint32_t word = 0;
            for (int j = 0; j < 4; j++) {
                int64_t p = block + 4 * i + j;
                uint32_t byte;
                if (p < length) byte = message[p];
                else if (p == length) byte = 0x80;
                else if (p >= total - 8) byte = (uint32_t)((bits >> (8 * (total - 1 - p))) & 0xFF);
                else byte = 0;
                word = (word << 8) | byte;
            }
            w[i] = word;
        }
        for (int t = 16; t < 80; t++) w[t] = rotl32(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
        uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
        for (int t = 0; t < 80; t++) {
            uint32_t f;
            if (t < 20) f = (b & c) | (~b & d);
            else if (t < 40 || t >= 60) f = b ^ c ^ d;
            else f = (b & c) | (b & d) | (c & d);
            uint32_t temp = rotl32(a, 5) + f + e + SHA1_K[t / 20] + w[t];
            e = d, d = c, c = rotl32(b, 30), b = a, a = temp;
        }
        h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
    }
    return byte_swap32(h[0]);
}

/* Twenty rounds on every lane; KIND is a constant in each expansion, so the lane loop has no branch and vectorizes. */
#define SHA1_ROUNDS(FIRST, KIND)                                                                                     \
    for (int t = FIRST; t < FIRST + 20; t++) {                                                                       \
        for (int lane = 0; lane < LANES; lane++) {                                                                   \
            uint32_t b = B[lane], c = C[lane], d = D[lane], f;                                                       \
            if (KIND == 0) f = (b & c) | (~b & d);                                                                   \
            else if (KIND == 1) f = b ^ c ^ d;                                                                       \
            else f = (b & c) | (b & d) | (c & d);                                                                    \
            uint32_t temp = rotl32(A[lane], 5) + f + E[lane] + SHA1_K[FIRST / 20] + W[t][lane];                      \
            E[lane] = d, D[lane] = c, C[lane] = rotl32(b, 30), B[lane] = A[lane], A[lane] = temp;                    \
        }                                                                                                            \
    }

/* sha1_hash32 of buf[starts[i]:ends[i]] for every i: messages of one block (<= 55 bytes, nearly every shingle) 32 at
 * a time, one per lane; longer ones one by one. */
void sha1_hash32_many(const uint8_t *buf, const int64_t *starts, const int64_t *ends, int64_t count, uint32_t *out) {
    uint32_t W[80][LANES];
    uint32_t A[LANES], B[LANES], C[LANES], D[LANES], E[LANES];
    int64_t short_index[LANES];
    int64_t i = 0;
    while (i < count) {
        int filled = 0;
        for (; i < count && filled < LANES; i++) {
            if (ends[i] - starts[i] > 55) out[i] = sha1_hash32_one(buf + starts[i], ends[i] - starts[i]);
            else short_index[filled++] = i;
        }
        if (!filled) break;
        for (int lane = 0; lane < LANES; lane++) {
            int64_t index = short_index[lane < filled ? lane : filled - 1];
            int64_t length = ends[index] - starts[index];
            uint8_t block[64] = {0};
            memcpy(block, buf + starts[index], (size_t)length);
            block[length] = 0x80;
            block[62] = (uint8_t)((length * 8) >> 8), block[63] = (uint8_t)((length * 8) & 0xFF);
            for (int k = 0; k < 16; k++)
                W[k][lane] = ((uint32_t)block[4 * k] << 24) | ((uint32_t)block[4 * k + 1] << 16) |
                             ((uint32_t)block[4 * k + 2] << 8) | (uint32_t)block[4 * k + 3];
        }
        for (int t = 16; t < 80; t++)
            for (int lane = 0; lane < LANES; lane++)
                W[t][lane] = rotl32(W[t - 3][lane] ^ W[t - 8][lane] ^ W[t - 14][lane] ^ W[t - 16][lane], 1);
        for (int lane = 0; lane < LANES; lane++)
            A[lane] = SHA1_INIT[0], B[lane] = SHA1_INIT[1], C[lane] = SHA1_INIT[2], D[lane] = SHA1_INIT[3],
            E[lane] = SHA1_INIT[4];
        SHA1_ROUNDS(0, 0)
        SHA1_ROUNDS(20, 1)
        SHA1_ROUNDS(40, 2)
        SHA1_ROUNDS(60, 1)
        for (int lane = 0; lane < filled; lane++) out[short_index[lane]] = byte_swap32(A[lane] + SHA1_INIT[0]);
    }
}

/* Each document's shingle count (words - ngram + 1, at least 1 when non-empty) as running offsets: docs + 1 values. */
void shingle_offsets(const uint8_t *buf, const int64_t *offsets, int64_t docs, int64_t ngram, int64_t *out) {
    out[0] = 0;
    for (int64_t doc = 0; doc < docs; doc++) {
        int64_t start = offsets[doc], end = offsets[doc + 1], count = 0;
        if (end > start) {
            int64_t words = 1;
            for (int64_t i = start; i < end; i++) words += buf[i] == 32;
            count = words - ngram + 1 > 1 ? words - ngram + 1 : 1;
        }
        out[doc + 1] = out[doc] + count;
    }
}

/* The byte range of every shingle, in the slots shingle_offsets gave; the last n words' starts kept in a ring. */
void shingle_ranges(const uint8_t *buf, const int64_t *offsets, int64_t docs, int64_t ngram,
                    const int64_t *shingle_offsets, int64_t *starts, int64_t *ends, int64_t *ring) {
    for (int64_t doc = 0; doc < docs; doc++) {
        int64_t start = offsets[doc], end = offsets[doc + 1], slot = shingle_offsets[doc];
        if (end == start) continue;
        if (shingle_offsets[doc + 1] - slot == 1) {
            starts[slot] = start, ends[slot] = end;
            continue;
        }
        ring[0] = start;
        int64_t word = 0;
        for (int64_t i = start; i <= end; i++) {
            if (i < end && buf[i] != 32) continue;
            if (word >= ngram - 1) {
                starts[slot] = ring[(word - ngram + 1) % ngram], ends[slot] = i;
                slot++;
            }
            word++;
            if (i < end) ring[word % ngram] = i + 1;
        }
    }
}

static inline uint64_t fmix32(uint64_t h) {
    h ^= h >> 16;
    h = (h * 0x85EBCA6Bu) & 0xFFFFFFFFu;
    h ^= h >> 13;
    h = (h * 0xC2B2AE35u) & 0xFFFFFFFFu;
    return h ^ (h >> 16);
}

/* Documents x permutations minima; `current` is scratch of num_perm values. */
void minhash_signatures(const uint32_t *hashes, const int64_t *shingle_offsets, int64_t docs, const uint64_t *a,
                        const uint64_t *b, int64_t num_perm, int legacy, uint32_t *out, uint64_t *current) {
    const uint64_t prime = (UINT64_C(1) << 61) - 1, max32 = 0xFFFFFFFFu;
    for (int64_t doc = 0; doc < docs; doc++) {
        for (int64_t k = 0; k < num_perm; k++) current[k] = max32;
        for (int64_t slot = shingle_offsets[doc]; slot < shingle_offsets[doc + 1]; slot++) {
            uint64_t hv = hashes[slot];
            if (legacy) {
                for (int64_t k = 0; k < num_perm; k++) {
                    uint64_t x = a[k] * hv + b[k]; /* wraps at 2**64 as datasketch's numpy does */
                    x = (x & prime) + (x >> 61);
                    if (x >= prime) x -= prime;
                    x &= max32;
                    if (x < current[k]) current[k] = x;
                }
            } else {
                hv = fmix32(hv);
                for (int64_t k = 0; k < num_perm; k++) {
                    uint64_t x = (a[k] * hv + b[k]) & max32;
                    if (x < current[k]) current[k] = x;
                }
            }
        }
        for (int64_t k = 0; k < num_perm; k++) out[doc * num_perm + k] = (uint32_t)current[k];
    }
}

/* Gopher's repetition counts: n-grams of `values` (word ids, or code points) hashed as a rolling polynomial and
 * counted in an open-addressing table of first occurrences. */
#define HASH_BASE UINT64_C(0x100000001B3)

typedef struct {
    uint64_t *hashes;
    int64_t *slots;
    int64_t *counts;
    uint64_t mask;
} GramTable;

/* Hashes of values[ends[i]:ends[i + n]] for i < grams, and an empty table for them; 0 when out of memory. */
static int gram_table(GramTable *table, const uint64_t *values, int64_t length, const int64_t *ends, int64_t grams,
                      int64_t n, int with_counts) {
    uint64_t *prefix = malloc(sizeof(uint64_t) * (size_t)(length + 1));
    uint64_t *power = malloc(sizeof(uint64_t) * (size_t)(length + 1));
    int64_t size = 16;
    while (size < 2 * grams) size *= 2;
    table->hashes = malloc(sizeof(uint64_t) * (size_t)(grams > 0 ? grams : 1));
    table->slots = malloc(sizeof(int64_t) * (size_t)size);
    table->counts = with_counts ? calloc((size_t)(grams > 0 ? grams : 1), sizeof(int64_t)) : NULL;
    table->mask = (uint64_t)(size - 1);
    int ok = prefix && power && table->hashes && table->slots && (table->counts || !with_counts);
    if (ok) {
        prefix[0] = 0, power[0] = 1;
        for (int64_t k = 0; k < length; k++) {
            prefix[k + 1] = prefix[k] * HASH_BASE + values[k] + 1;
            power[k + 1] = power[k] * HASH_BASE;
        }
        for (int64_t i = 0; i < grams; i++) {
            int64_t a = ends[i], b = ends[i + n];
            table->hashes[i] = prefix[b] - prefix[a] * power[b - a];
        }
        memset(table->slots, 0xFF, sizeof(int64_t) * (size_t)size);
    }
    free(prefix);
    free(power);
    return ok;
}

static void free_gram_table(GramTable *table) {
    free(table->hashes);
    free(table->slots);
    free(table->counts);
}

/* The slot of the n-gram at i: the one holding an equal n-gram, else the empty slot where it belongs. */
static uint64_t gram_slot(const GramTable *table, const uint64_t *values, const int64_t *ends, int64_t n, int64_t i) {
    uint64_t hash = table->hashes[i], slot = (hash ^ (hash >> 32)) & table->mask;
    while (table->slots[slot] != -1) {
        int64_t j = table->slots[slot];
        if (table->hashes[j] == hash && ends[j + n] - ends[j] == ends[i + n] - ends[i] &&
            !memcmp(values + ends[j], values + ends[i], sizeof(uint64_t) * (size_t)(ends[i + n] - ends[i])))
            return slot;
        slot = (slot + 1) & table->mask;
    }
    return slot;
}

/* Characters of the most frequent n-gram times its count (of tied ones the first seen); -1 when out of memory. */
int64_t top_gram_chars(const uint64_t *orths, int64_t length, const int64_t *ends, int64_t n) {
    int64_t grams = length + 1 - n, *positions;
    GramTable table;
    if (grams <= 0) return 0;
    positions = malloc(sizeof(int64_t) * (size_t)(length + 1));
    if (!positions) return -1;
    for (int64_t k = 0; k <= length; k++) positions[k] = k;
    if (!gram_table(&table, orths, length, positions, grams, n, 1)) {
        free_gram_table(&table);
        free(positions);
        return -1;
    }
    for (int64_t i = 0; i < grams; i++) {
        uint64_t slot = gram_slot(&table, orths, positions, n, i);
        if (table.slots[slot] == -1) table.slots[slot] = i;
        table.counts[table.slots[slot]]++;
    }
    int64_t top = 0;
    for (int64_t i = 1; i < grams; i++)
        if (table.counts[i] > table.counts[top]) top = i;
    int64_t result = (ends[top + n] - ends[top] + n - 1) * table.counts[top];
    free_gram_table(&table);
    free(positions);
    return result;
}

/* Characters of repeated ""-joined n-grams (word i is joined[ends[i]:ends[i + 1]], `boundaries` = words + 1); a
 * repeat counts and its n words are skipped. -1 when out of memory. */
int64_t repeated_chars(const uint64_t *joined, int64_t length, const int64_t *ends, int64_t boundaries, int64_t n) {
    int64_t grams = boundaries - n, repeated = 0, index = 0;
    GramTable table;
    if (grams <= 0) return 0;
    if (!gram_table(&table, joined, length, ends, grams, n, 0)) {
        free_gram_table(&table);
        return -1;
    }
    while (index < grams) {
        uint64_t slot = gram_slot(&table, joined, ends, n, index);
        if (table.slots[slot] == -1) {
            table.slots[slot] = index;
            index++;
        } else {
            repeated += ends[index + n] - ends[index];
            index += n;
        }
    }
    free_gram_table(&table);
    return repeated;
}

/* Normalization: UTF-8 decoded in place (the input is valid, encoded by Python). */
enum { KEEP, SPACE, DELETE, ZERO };

static inline uint32_t decode(const uint8_t *data, int64_t i, int *length) {
    uint32_t byte = data[i];
    if (byte < 0xE0) {
        *length = 2;
        return ((byte & 0x1F) << 6) | (data[i + 1] & 0x3F);
    }
    if (byte < 0xF0) {
        *length = 3;
        return ((byte & 0x0F) << 12) | ((data[i + 1] & 0x3Fu) << 6) | (data[i + 2] & 0x3F);
    }
    *length = 4;
    return ((byte & 0x07) << 18) | ((data[i + 1] & 0x3Fu) << 12) | ((data[i + 2] & 0x3Fu) << 6) | (data[i + 3] & 0x3F);
}

/* The distinct non-ASCII code points, ascending, into out; their number, or -1 when out of memory. */
int64_t non_ascii(const uint8_t *data, int64_t length, int64_t *out) {
    uint8_t *seen = calloc(0x110000, 1);
    if (!seen) return -1;
    for (int64_t i = 0; i < length;) {
        if (data[i] < 128) {
            i++;
            continue;
        }
        int size;
        seen[decode(data, i, &size)] = 1;
        i += size;
    }
    int64_t count = 0;
    for (int64_t code = 0; code < 0x110000; code++)
        if (seen[code]) out[count++] = code;
    free(seen);
    return count;
}

/* Documents split at U+E000, whitespace collapsed to single spaces, each trimmed; returns the bytes written and sets
 * *documents to the number of offsets written (documents + 1). */
int64_t collapse(const uint8_t *data, int64_t length, int strip_punctuation, int zero_digits, const uint8_t *actions,
                 uint8_t *out, int64_t *offsets, int64_t *documents) {
    int64_t written = 0, count = 1, i = 0;
    int pending_space = 0, document_empty = 1;
    offsets[0] = 0;
    while (i < length) {
        uint8_t byte = data[i];
        int size = 1, action = KEEP;
        if (byte >= 128) {
            uint32_t code = decode(data, i, &size);
            if (code == 0xE000) {
                offsets[count++] = written;
                pending_space = 0, document_empty = 1;
                i += size;
                continue;
            }
            action = actions[code];
        } else if (byte == 32 || (9 <= byte && byte <= 13) || (28 <= byte && byte <= 31)) {
            action = SPACE;
        } else if (strip_punctuation) {
            if (48 <= byte && byte <= 57) action = zero_digits ? ZERO : KEEP;
            else if (!((97 <= byte && byte <= 122) || (65 <= byte && byte <= 90))) action = DELETE;
        }
        if (action == SPACE) {
            pending_space = 1;
        } else if (action != DELETE) {
            if (pending_space && !document_empty) out[written++] = 32;
            if (action == ZERO) out[written++] = 48;
            else {
                memcpy(out + written, data + i, (size_t)size);
                written += size;
            }
            pending_space = 0, document_empty = 0;
        }
        i += size;
    }
    offsets[count++] = written;
    *documents = count;
    return written;
}

/* Benchmark n-grams: FNV-1a word hashes combined by a polynomial rolled over the last n words. Writes at most
 * `capacity` results and returns how many there are, so a caller whose bound was short calls again. */
int64_t ngram_hashes(const uint8_t *buffer, const int64_t *offsets, int64_t docs, int64_t n, const uint64_t *bitmap,
                     int64_t bitmap_words, int64_t capacity, uint64_t *hashes, int64_t *doc_of, int64_t *starts,
                     uint64_t *ring) {
    const uint64_t base = UINT64_C(0x9E3779B97F4A7C15), fnv_basis = UINT64_C(0xCBF29CE484222325);
    uint64_t top = 1, shift = 0;
    for (int64_t k = 0; k < n - 1; k++) top *= base;
    if (bitmap_words) {
        uint64_t bits = (uint64_t)bitmap_words * 64, log2 = 0;
        while (bits >>= 1) log2++;
        shift = 64 - log2;
    }
    int64_t out = 0;
    for (int64_t doc = 0; doc < docs; doc++) {
        int64_t start = offsets[doc], end = offsets[doc + 1], word = 0;
        if (end == start) continue;
        uint64_t rolling = 0, value = fnv_basis;
        for (int64_t i = start; i <= end; i++) {
            if (i < end && buffer[i] != 32) {
                value = (value ^ buffer[i]) * UINT64_C(0x100000001B3);
                continue;
            }
            if (word >= n) rolling -= ring[word % n] * top;
            rolling = rolling * base + value;
            ring[word % n] = value;
            word++;
            value = fnv_basis;
            if (word < n) continue;
            if (bitmap_words) {
                uint64_t bit = rolling >> shift;
                if (!((bitmap[bit >> 6] >> (bit & 63)) & 1)) continue;
            }
            if (out < capacity) hashes[out] = rolling, doc_of[out] = doc, starts[out] = word - n;
            out++;
        }
    }
    return out;
}

/* Root (smallest index) of every index after joining each left[i] with right[i]; parent holds 0..count-1 on entry. */
void union_find(const int64_t *left, const int64_t *right, int64_t pairs, int64_t count, int64_t *parent) {
    for (int64_t i = 0; i < pairs; i++) {
        int64_t a = left[i], b = right[i];
        while (parent[a] != a) {
            parent[a] = parent[parent[a]];
            a = parent[a];
        }
        while (parent[b] != b) {
            parent[b] = parent[parent[b]];
            b = parent[b];
        }
        if (a < b) parent[b] = a;
        else if (b < a) parent[a] = b;
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t root = i;
        while (parent[root] != root) root = parent[root];
        parent[i] = root;
    }
}

/* Jaccard of sorted unique sets, pair by pair: a merge walk counting the common members. */
void jaccard(const uint32_t *left, const int64_t *left_offsets, const uint32_t *right, const int64_t *right_offsets,
             int64_t pairs, double *out) {
    for (int64_t i = 0; i < pairs; i++) {
        int64_t a = left_offsets[i], a_end = left_offsets[i + 1], b = right_offsets[i], b_end = right_offsets[i + 1];
        int64_t size = (a_end - a) + (b_end - b), common = 0;
        while (a < a_end && b < b_end) {
            if (left[a] == right[b]) common++, a++, b++;
            else if (left[a] < right[b]) a++;
            else b++;
        }
        out[i] = size > common ? (double)common / (double)(size - common) : 1.0;
    }
}
