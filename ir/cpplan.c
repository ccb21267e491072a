/* The context-parallel communication plan (s2c/cpplan.h): which remote KV
 * blocks each rank's queries read, per kv head, and its schedules remapped
 * onto its receive buffer and its own tokens. */
#include "s2c/cpplan.h"
#include "ir_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* (rank, kv head, block) triples a plan may hold: its block sets and lists */
#define S2_CP_MAX_BLOCK_SETS (INT64_C(1) << 28)

struct s2_cp_plan {
    const s2_pattern *p;
    s2_cp_plan_args a;
    int P, chunks, kvh, bs, align;
    int64_t nblocks, chunk_blocks;
    int64_t *recv_tokens;          /* [P] */
    s2_cp_block **recv, **send;    /* [P * kvh] */
    int64_t *nrecv, *nsend;        /* [P * kvh] */
    double *pairs;                 /* [P] */
    s2_layout **lay;               /* [P], with schedules */
    s2_schedule **fwd, **bwd;      /* [P], with schedules */
};

static int rank_of_chunk(const s2_cp_plan *c, int64_t ch)
{
    return c->a.sharding == S2_CP_ZIGZAG && ch >= c->P ? (int)(2 * c->P - 1 - ch) : (int)ch;
}

int s2_cp_plan_owner(const s2_cp_plan *c, int64_t n)
{
    return !c || n < 0 || n >= c->nblocks ? -1 : rank_of_chunk(c, n / c->chunk_blocks);
}

int s2_cp_plan_shard(const s2_cp_plan *c, int rank, int64_t start[2], int64_t len[2])
{
    if (!c || rank < 0 || rank >= c->P || !start || !len)
        return 0;
    int64_t ct = c->chunk_blocks * c->bs;
    start[0] = rank * ct;
    len[0] = ct;
    if (c->a.sharding != S2_CP_ZIGZAG)
        return 1;
    start[1] = (2 * (int64_t)c->P - 1 - rank) * ct;
    len[1] = ct;
    return 2;
}

/* Block n's index among its owner's blocks (sequence order). */
static int64_t local_block(const s2_cp_plan *c, int64_t n)
{
    int64_t ch = n / c->chunk_blocks, off = n % c->chunk_blocks;
    return ch < c->P ? off : c->chunk_blocks + off;
}

int64_t s2_cp_plan_recv_tokens(const s2_cp_plan *c, int rank)
{
    return !c || rank < 0 || rank >= c->P ? 0 : c->recv_tokens[rank];
}

void s2_cp_plan_free(s2_cp_plan *c)
{
    if (!c)
        return;
    for (int64_t i = 0; c->recv && i < (int64_t)c->P * c->kvh; i++) {
        free(c->recv[i]);
        if (c->send)
            free(c->send[i]);
    }
    for (int r = 0; r < c->P; r++) {
        if (c->fwd)
            s2_schedule_free(c->fwd[r]);
        if (c->bwd)
            s2_schedule_free(c->bwd[r]);
        if (c->lay)
            s2_layout_free(c->lay[r]);
    }
    free(c->recv);
    free(c->send);
    free(c->nrecv);
    free(c->nsend);
    free(c->recv_tokens);
    free(c->pairs);
    free(c->fwd);
    free(c->bwd);
    free(c->lay);
    free(c);
}

static bool pow2_in(int v, int lo, int hi) { return v >= lo && v <= hi && (v & (v - 1)) == 0; }

static s2_status check_args(s2_ctx *ctx, const s2_pattern *p, const s2_cp_plan_args *a)
{
    if (!p || !p->rules || !a)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_plan_new: %s is NULL", !a ? "args" : "pattern");
    if (a->ranks < 1 || a->ranks > S2_CP_MAX_RANKS)
        return s2_fail(ctx, S2_ERR_INVALID, "cp plan: %d ranks (1..%d)", a->ranks, S2_CP_MAX_RANKS);
    if (a->sharding != S2_CP_CONTIGUOUS && a->sharding != S2_CP_ZIGZAG)
        return s2_fail(ctx, S2_ERR_INVALID, "cp plan: sharding %d is neither contiguous (0) nor zigzag (1)",
                       (int)a->sharding);
    int bs = p->block_size;
    if (!pow2_in(a->spec.block_m, 16, 128) || !pow2_in(a->spec.block_n, 16, 128) || a->spec.block_m < bs ||
        a->spec.block_n < bs)
        return s2_fail(ctx, S2_ERR_INVALID,
                       "cp plan: tile %d x %d: each side a power of two in %d..128 (the pattern's block is %d)",
                       a->spec.block_m, a->spec.block_n, bs, bs);
    if (a->max_entries < 0)
        return s2_fail(ctx, S2_ERR_INVALID, "cp plan: max_entries %" PRId64 " is negative", a->max_entries);
    int64_t chunks = (int64_t)a->ranks * (a->sharding == S2_CP_ZIGZAG ? 2 : 1);
    int64_t align = s2_max64(a->spec.block_m, a->spec.block_n);
    if (a->seq_len < 1 || a->seq_len > s2_layout_max_kv_len(p))
        return s2_fail(ctx, S2_ERR_SEQ_LEN, "cp plan: seq_len %" PRId64 " outside 1..%" PRId64 " (the pattern's)",
                       a->seq_len, s2_layout_max_kv_len(p));
    if (a->seq_len % (chunks * align))
        return s2_fail(ctx, S2_ERR_INVALID,
                       "cp plan: seq_len %" PRId64 " is not %" PRId64 " chunks of whole %" PRId64
                       "-token tiles (a multiple of %" PRId64 ")",
                       a->seq_len, chunks, align, chunks * align);
    return S2_OK;
}

/* need[(r * kvh + g) * words + n / 64]: rank r reads key block n of kv head g from another rank */
typedef struct need_map {
    uint64_t *bits;
    int64_t words;
    uint8_t *class_kv;   /* [num_classes * kvh]: class c has a head of kv head g */
} need_map;

static void mark(const s2_cp_plan *c, need_map *nm, int cls, int r, int64_t n)
{
    for (int g = 0; g < c->kvh; g++)
        if (nm->class_kv[cls * c->kvh + g])
            nm->bits[((int64_t)r * c->kvh + g) * nm->words + n / 64] |= UINT64_C(1) << (n % 64);
}

/* The fast way: each key block's readers are the run [n, last reader]. */
static s2_status plan_by_runs(s2_ctx *ctx, s2_cp_plan *c, const s2_layout *L, need_map *nm)
{
    int64_t nb = c->nblocks, bs = c->bs;
    int64_t *diff = malloc((size_t)(nb + 1) * sizeof *diff);
    if (!diff)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (int cl = 0; cl < L->num_classes; cl++) {
        int q = L->class_rep[cl];
        memset(diff, 0, (size_t)(nb + 1) * sizeof *diff);
        for (int64_t n = 0; n < nb; n++) {
            int64_t last = s2_kv_last_reader(c->p, q, n, c->a.seq_len);
            if (last < 0)
                continue;
            int64_t b = last == S2_LIVE_FOREVER ? nb - 1 : last / bs;
            diff[n]++;
            diff[b + 1]--;
            int own = s2_cp_plan_owner(c, n);
            for (int64_t ch = n / c->chunk_blocks; ch <= b / c->chunk_blocks; ch++) {
                int r = rank_of_chunk(c, ch);
                if (r != own)
                    mark(c, nm, cl, r, n);
            }
        }
        int64_t cnt = 0;
        for (int64_t m = 0; m < nb; m++) {
            cnt += diff[m];
            double pairs = (double)cnt * (double)(bs * bs);
            if (s2_ir_block_kept(c->p, q, m, m))
                pairs -= (double)(bs * (bs - 1) / 2);   /* the diagonal block keeps its lower triangle */
            c->pairs[s2_cp_plan_owner(c, m)] += pairs * L->class_size[cl];
        }
    }
    free(diff);
    return S2_OK;
}

/* The general way: every entry of the single-GPU forward schedule. */
static s2_status plan_by_entries(s2_ctx *ctx, s2_cp_plan *c, const s2_layout *L, const s2_tile_geom *g,
                                 need_map *nm)
{
    int64_t cap = s2_layout_max_entries(L, c->a.spec), bs = c->bs;
    s2_tile_entry *buf = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *buf);
    if (!buf)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    s2_status st = S2_OK;
    for (int cl = 0; cl < L->num_classes && st == S2_OK; cl++) {
        int q = L->class_rep[cl];
        for (int64_t t = 0; t < g->q_tiles && st == S2_OK; t++) {
            int64_t cnt = 0;
            if ((st = s2_layout_q_tile_entries(ctx, L, c->a.spec, q, t, buf, cap, &cnt)) != S2_OK)
                break;
            for (int64_t e = 0; e < cnt; e++)
                for (int i = 0; i < g->sub_m; i++)
                    for (int j = 0; j < g->sub_n; j++) {
                        if (!(buf[e].live >> (i * g->sub_n + j) & 1))
                            continue;
                        int64_t m = t * g->sub_m + i, n = buf[e].tile * g->sub_n + j;
                        int r = s2_cp_plan_owner(c, m);
                        if (s2_cp_plan_owner(c, n) != r)
                            mark(c, nm, cl, r, n);
                        c->pairs[r] += (double)s2_ir_rect_pairs(m * bs, (m + 1) * bs, n * bs, (n + 1) * bs,
                                                                c->p->causal) * L->class_size[cl];
                    }
        }
    }
    free(buf);
    return st;
}

/* Receive lists from the need bits, send lists from the receive lists. */
static s2_status make_lists(s2_ctx *ctx, s2_cp_plan *c, const need_map *nm)
{
    int64_t lists = (int64_t)c->P * c->kvh;
    for (int64_t i = 0; i < lists; i++) {
        const uint64_t *w = nm->bits + i * nm->words;
        int64_t n = 0;
        for (int64_t k = 0; k < nm->words; k++)
            n += __builtin_popcountll(w[k]);
        c->recv[i] = malloc((size_t)(n > 0 ? n : 1) * sizeof(s2_cp_block));
        if (!c->recv[i])
            return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        for (int64_t k = 0, s = 0; k < nm->words; k++)
            for (uint64_t b = w[k]; b; b &= b - 1) {
                int64_t blk = k * 64 + __builtin_ctzll(b);
                c->recv[i][s] = (s2_cp_block){blk, s, s2_cp_plan_owner(c, blk)};
                s++;
            }
        c->nrecv[i] = n;
    }
    for (int r = 0; r < c->P; r++) {
        int64_t most = 0;
        for (int g = 0; g < c->kvh; g++)
            most = s2_max64(most, c->nrecv[(int64_t)r * c->kvh + g]);
        c->recv_tokens[r] = s2_cdiv(most * c->bs, c->align) * c->align;
    }
    for (int64_t i = 0; i < lists; i++)
        for (int64_t k = 0; k < c->nrecv[i]; k++)
            c->nsend[(int64_t)c->recv[i][k].peer * c->kvh + i % c->kvh]++;
    int64_t *fill = calloc((size_t)lists, sizeof *fill);
    if (!fill)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < lists; i++)
        if (!(c->send[i] = malloc((size_t)(c->nsend[i] > 0 ? c->nsend[i] : 1) * sizeof(s2_cp_block)))) {
            free(fill);
            return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        }
    /* receivers in increasing order, each list by block: a sender's list is by receiver, then block */
    for (int64_t i = 0; i < lists; i++)
        for (int64_t k = 0; k < c->nrecv[i]; k++) {
            const s2_cp_block *x = &c->recv[i][k];
            int64_t si = (int64_t)x->peer * c->kvh + i % c->kvh;
            c->send[si][fill[si]++] = (s2_cp_block){x->block, x->slot, (int)(i / c->kvh)};
        }
    free(fill);
    return S2_OK;
}

static int cmp_i64(const void *x, const void *y)
{
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

/* Key block n of kv head g in rank r's layout (its receive slots, then its own blocks). */
static int64_t remap_block(const s2_cp_plan *c, int r, int g, int64_t n)
{
    if (s2_cp_plan_owner(c, n) == r)
        return c->recv_tokens[r] / c->bs + local_block(c, n);
    const s2_cp_block *v = c->recv[(int64_t)r * c->kvh + g];
    int64_t lo = 0, hi = c->nrecv[(int64_t)r * c->kvh + g] - 1;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (v[mid].block == n)
            return v[mid].slot;
        if (v[mid].block < n)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

/* Rank r's forward schedule: one class per (head class, kv head); each list
 * the single-GPU list of its query tile, its key blocks moved to their
 * places in r's layout. */
static s2_status rank_schedule(s2_ctx *ctx, s2_cp_plan *c, const s2_layout *L, int r)
{
    s2_status st;
    int64_t start[2], len[2];
    int nr = s2_cp_plan_shard(c, r, start, len);
    int64_t local = len[0] + (nr > 1 ? len[1] : 0), R = c->recv_tokens[r];
    if ((st = s2_layout_new(ctx, c->p, local, R + local, &c->lay[r])) != S2_OK)
        return st;
    const s2_layout *Lr = c->lay[r];
    s2_tile_geom g, G;
    if ((st = s2_layout_tile_geom(ctx, Lr, c->a.spec, &g)) != S2_OK ||
        (st = s2_layout_tile_geom(ctx, L, c->a.spec, &G)) != S2_OK)
        return st;
    int heads = c->p->heads, group = heads / c->kvh, nc = L->num_classes;
    int *id = malloc((size_t)nc * c->kvh * sizeof *id);
    s2_schedule *s = calloc(1, sizeof *s);
    int64_t cap = s2_layout_max_entries(L, c->a.spec);
    s2_tile_entry *buf = malloc((size_t)(cap > 0 ? cap : 1) * sizeof *buf);
    int64_t *keys = malloc((size_t)(cap > 0 ? cap : 1) * G.sub_n * sizeof *keys);
    int64_t ecap = 1024, ne = 0;
    if (!id || !s || !buf || !keys)
        goto nomem;
    s->geom = g;
    s->heads = heads;
    s->class_of_head = malloc((size_t)heads * sizeof(int));
    s->entries = malloc((size_t)ecap * sizeof *s->entries);
    if (!s->class_of_head || !s->entries)
        goto nomem;
    for (int i = 0; i < nc * c->kvh; i++)
        id[i] = -1;
    for (int h = 0; h < heads; h++) {
        int k = L->class_of_head[h] * c->kvh + h / group;
        if (id[k] < 0)
            id[k] = s->num_classes++;
        s->class_of_head[h] = id[k];
    }
    int64_t lists = g.q_tiles;
    if (!(s->offsets = calloc((size_t)(s->num_classes * lists + 1), sizeof(int64_t))))
        goto nomem;
    int *key_of = malloc((size_t)s->num_classes * sizeof *key_of);
    if (!key_of)
        goto nomem;
    for (int k = 0; k < nc * c->kvh; k++)
        if (id[k] >= 0)
            key_of[id[k]] = k;
    memcpy(id, key_of, (size_t)s->num_classes * sizeof *id);   /* id[class] = its (head class, kv head) */
    free(key_of);
    for (int n = 0; n < s->num_classes; n++) {
        int k = id[n], cl = k / c->kvh, kv = k % c->kvh, q = L->class_rep[cl];
        for (int64_t i = 0; i < lists; i++) {
            int64_t off = i * g.block_m, pos = off < len[0] ? start[0] + off : start[1] + off - len[0];
            int64_t t = pos / G.block_m, cnt = 0, nk = 0;
            if ((st = s2_layout_q_tile_entries(ctx, L, c->a.spec, q, t, buf, cap, &cnt)) != S2_OK)
                goto fail;
            /* key = new block * 2^32 | the column's query sub-blocks: sorted, then merged per new tile */
            for (int64_t e = 0; e < cnt; e++)
                for (int j = 0; j < G.sub_n; j++) {
                    uint64_t rows = 0;
                    for (int a = 0; a < G.sub_m; a++)
                        rows |= (buf[e].live >> (a * G.sub_n + j) & 1) << a;
                    if (!rows)
                        continue;
                    int64_t nb = remap_block(c, r, kv, buf[e].tile * G.sub_n + j);
                    if (nb < 0) {
                        st = s2_fail(ctx, S2_ERR_INTERNAL, "cp plan: rank %d lacks key block %" PRId64, r,
                                     buf[e].tile * G.sub_n + j);
                        goto fail;
                    }
                    keys[nk++] = nb << 32 | (int64_t)rows;
                }
            qsort(keys, (size_t)nk, sizeof *keys, cmp_i64);
            for (int64_t x = 0; x < nk;) {
                int64_t tile = (keys[x] >> 32) / g.sub_n;
                uint64_t live = 0;
                for (; x < nk && (keys[x] >> 32) / g.sub_n == tile; x++) {
                    int col = (int)((keys[x] >> 32) % g.sub_n);
                    uint64_t rows = (uint64_t)(keys[x] & 0xffffffff);
                    for (int a = 0; a < g.sub_m; a++)
                        live |= (rows >> a & 1) << (a * g.sub_n + col);
                }
                if (ne == ecap) {
                    s2_tile_entry *grown = realloc(s->entries, (size_t)(ecap *= 2) * sizeof *grown);
                    if (!grown)
                        goto nomem;
                    s->entries = grown;
                }
                s2_ir_entry_fill(Lr, &g, g.first_q_tile + i, tile, live, &s->entries[ne++]);
            }
            s->offsets[(int64_t)n * lists + i + 1] = ne;
        }
    }
    c->fwd[r] = s;
    s = NULL;
    st = s2_schedule_transpose(ctx, Lr, c->fwd[r], (s2_tile_spec){g.block_m, g.sub_n_size}, &c->bwd[r]);
    goto done;
nomem:
    st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
fail:
done:
    s2_schedule_free(s);
    free(id);
    free(buf);
    free(keys);
    return st;
}

s2_status s2_cp_plan_new(s2_ctx *ctx, const s2_pattern *p, const s2_cp_plan_args *args, s2_cp_plan **out)
{
    if (!out)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_plan_new: out is NULL");
    *out = NULL;
    s2_status st = check_args(ctx, p, args);
    if (st != S2_OK)
        return st;
    s2_cp_plan *c = calloc(1, sizeof *c);
    if (!c)
        return s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
    c->p = p;
    c->a = *args;
    if (!c->a.max_entries)
        c->a.max_entries = INT64_C(1) << 28;
    c->P = args->ranks;
    c->chunks = c->P * (args->sharding == S2_CP_ZIGZAG ? 2 : 1);
    c->kvh = p->kv_heads;
    c->bs = p->block_size;
    c->align = (int)s2_max64(args->spec.block_m, args->spec.block_n);
    c->nblocks = args->seq_len / c->bs;
    c->chunk_blocks = c->nblocks / c->chunks;
    int64_t lists = (int64_t)c->P * c->kvh;
    s2_layout *L = NULL;
    need_map nm = {0};
    nm.words = s2_cdiv(c->nblocks, 64);
    /* the plan's size: a block set per (rank, kv head), lists up to as long */
    if ((double)lists * (double)c->nblocks > (double)S2_CP_MAX_BLOCK_SETS) {
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                     "cp plan: %d ranks x %d kv heads x %" PRId64 " blocks: over 2^28 (rank, kv head, block) sets",
                     c->P, c->kvh, c->nblocks);
        goto out;
    }
    c->recv = calloc((size_t)lists, sizeof *c->recv);
    c->send = calloc((size_t)lists, sizeof *c->send);
    c->nrecv = calloc((size_t)lists, sizeof *c->nrecv);
    c->nsend = calloc((size_t)lists, sizeof *c->nsend);
    c->recv_tokens = calloc((size_t)c->P, sizeof *c->recv_tokens);
    c->pairs = calloc((size_t)c->P, sizeof *c->pairs);
    nm.bits = calloc((size_t)(lists * nm.words), sizeof *nm.bits);
    if (!c->recv || !c->send || !c->nrecv || !c->nsend || !c->recv_tokens || !c->pairs || !nm.bits) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto out;
    }
    if ((st = s2_layout_new(ctx, p, args->seq_len, args->seq_len, &L)) != S2_OK)
        goto out;
    s2_tile_geom g;
    if ((st = s2_layout_tile_geom(ctx, L, args->spec, &g)) != S2_OK)
        goto out;
    if (!(nm.class_kv = calloc((size_t)L->num_classes * c->kvh, 1))) {
        st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (int h = 0; h < p->heads; h++)
        nm.class_kv[L->class_of_head[h] * c->kvh + h / (p->heads / c->kvh)] = 1;
    bool runs = p->causal && !args->schedules;
    for (int cl = 0; cl < L->num_classes; cl++)
        runs = runs && s2_ir_readers_one_run(p, L->class_rep[cl]);
    if (runs && (double)c->nblocks * c->chunks * L->num_classes > (double)S2_CP_MAX_BLOCK_SETS * 16) {
        st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                     "cp plan: %" PRId64 " blocks x %d chunks x %d head classes: over 2^32 steps", c->nblocks,
                     c->chunks, L->num_classes);
        goto out;
    }
    if (!runs) {
        int64_t total = 0;
        if ((st = s2_layout_entries_bound(ctx, L, args->spec, false, 1, c->a.max_entries, NULL, &total)) != S2_OK)
            goto out;
        if (total > c->a.max_entries) {
            st = s2_fail(ctx, S2_ERR_UNSUPPORTED,
                         "cp plan: the single-GPU schedule holds over %" PRId64 " entries (max_entries)%s",
                         c->a.max_entries, args->schedules ? "" : "; only causal absolute rules are planned by runs");
            goto out;
        }
    }
    if ((st = runs ? plan_by_runs(ctx, c, L, &nm) : plan_by_entries(ctx, c, L, &g, &nm)) != S2_OK ||
        (st = make_lists(ctx, c, &nm)) != S2_OK)
        goto out;
    if (args->schedules) {
        c->lay = calloc((size_t)c->P, sizeof *c->lay);
        c->fwd = calloc((size_t)c->P, sizeof *c->fwd);
        c->bwd = calloc((size_t)c->P, sizeof *c->bwd);
        if (!c->lay || !c->fwd || !c->bwd) {
            st = s2_fail(ctx, S2_ERR_NOMEM, "out of memory");
            goto out;
        }
        for (int r = 0; r < c->P && st == S2_OK; r++)
            st = rank_schedule(ctx, c, L, r);
    }
out:
    free(nm.bits);
    free(nm.class_kv);
    s2_layout_free(L);
    if (st != S2_OK)
        s2_cp_plan_free(c);
    else
        *out = c;
    return st;
}

static s2_status list_of(s2_ctx *ctx, const s2_cp_plan *c, int rank, int kv_head, bool send,
                         const s2_cp_block **list, int64_t *count)
{
    if (!c || !list || !count)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "cp plan: a NULL argument");
    if (rank < 0 || rank >= c->P || kv_head < 0 || kv_head >= c->kvh)
        return s2_fail(ctx, S2_ERR_INVALID, "cp plan: rank %d of %d, kv head %d of %d", rank, c->P, kv_head, c->kvh);
    int64_t i = (int64_t)rank * c->kvh + kv_head;
    *list = send ? c->send[i] : c->recv[i];
    *count = send ? c->nsend[i] : c->nrecv[i];
    return S2_OK;
}

s2_status s2_cp_plan_recv(s2_ctx *ctx, const s2_cp_plan *c, int rank, int kv_head, const s2_cp_block **list,
                          int64_t *count)
{
    return list_of(ctx, c, rank, kv_head, false, list, count);
}

s2_status s2_cp_plan_send(s2_ctx *ctx, const s2_cp_plan *c, int rank, int kv_head, const s2_cp_block **list,
                          int64_t *count)
{
    return list_of(ctx, c, rank, kv_head, true, list, count);
}

const s2_layout *s2_cp_plan_layout(const s2_cp_plan *c, int rank)
{
    return !c || !c->lay || rank < 0 || rank >= c->P ? NULL : c->lay[rank];
}

const s2_schedule *s2_cp_plan_schedule(const s2_cp_plan *c, int rank, bool transposed)
{
    if (!c || !c->fwd || rank < 0 || rank >= c->P)
        return NULL;
    return transposed ? c->bwd[rank] : c->fwd[rank];
}

s2_status s2_cp_plan_rank_stats(s2_ctx *ctx, const s2_cp_plan *c, int rank, int head_dim, s2_dtype dtype,
                                s2_cp_rank_stats *st)
{
    if (!c || !st)
        return s2_fail(ctx, S2_ERR_NULL_ARG, "s2_cp_plan_rank_stats: %s is NULL", !c ? "plan" : "stats");
    if (rank < 0 || rank >= c->P || head_dim < 1 || s2_dtype_size(dtype) == 0)
        return s2_fail(ctx, S2_ERR_INVALID, "s2_cp_plan_rank_stats: rank %d of %d, head_dim %d, dtype %d", rank,
                       c->P, head_dim, (int)dtype);
    memset(st, 0, sizeof *st);
    for (int g = 0; g < c->kvh; g++) {
        st->recv_blocks += c->nrecv[(int64_t)rank * c->kvh + g];
        st->send_blocks += c->nsend[(int64_t)rank * c->kvh + g];
    }
    double per_token = 2.0 * head_dim * (double)s2_dtype_size(dtype);   /* K and V */
    st->recv_bytes = (double)st->recv_blocks * c->bs * per_token;
    st->send_bytes = (double)st->send_blocks * c->bs * per_token;
    int64_t start[2], len[2];
    int nr = s2_cp_plan_shard(c, rank, start, len);
    double own = (double)(len[0] + (nr > 1 ? len[1] : 0));
    st->ring_bytes = ((double)c->a.seq_len - own) * c->kvh * per_token;
    st->kept_pairs = c->pairs[rank];
    st->fwd_flops = 4.0 * st->kept_pairs * head_dim;
    return S2_OK;
}
