/* Training: a few Adam steps on a toy attention layer, with the gradients
 * of attention from s2_attn_backward, next to the same steps done by the
 * float64 CPU reference.
 *
 *   train [PATTERN_FILE]     default: train.yaml next to this source
 *
 * The layer: q, k, v = X·Wq, X·Wk, X·Wv (X: B x S x D_MODEL, W: D_MODEL x
 * H·D, float on the host), O = attention(q, k, v) under the pattern,
 * loss L = mean((O - T)²) against a fixed target T (what a teacher layer
 * with other random weights outputs under dense causal attention, so the
 * loss can go down).  Per step the projections and their backprop run on
 * the host; q, k, v are rounded to bf16 and go through s2_attn_forward
 * (saving LSE) and s2_attn_backward (kernels from s2_jit_compile; the
 * workspace from s2_attn_backward_workspace, so that blocks of 64+ on sm_90a
 * take the dS path).  A
 * second model, from the same initial weights, takes the same steps with
 * s2_ref_forward / s2_ref_backward in float64 on its own bf16-rounded q, k,
 * v.  For each pattern of the file both loss curves are printed; the GPU's
 * must stay within LOSS_TOL (relative) of the reference's at every step and
 * fall by at least MIN_DROP over the run.  Exits 0 when every check
 * passes, 1 on a failure, 77 without a usable GPU.  S2C_SEED=N repeats a run. */
#include "../common/example.h"
#include "s2c/attn_runtime.h"
#include "s2c/jit.h"
#include "s2c/layout.h"
#include "s2c/pattern.h"
#include "s2c/ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef TRAIN_PATTERN_FILE
#define TRAIN_PATTERN_FILE "train.yaml"
#endif

enum { B = 2, S = 256, H = 4, D = 64, D_MODEL = 64, HD = H * D, STEPS = 20 };
enum { ROWS = B * S, N_X = ROWS * D_MODEL, N_W = D_MODEL * HD, N_ACT = ROWS * HD, N_LSE = B * H * S };

static const s2_dtype DT = S2_DTYPE_BF16;
static const double LOSS_TOL = 2e-2; /* bf16 q, k, v, o, dO and gradients */
static const double MIN_DROP = 0.2;  /* the last loss at most 80% of the first */
static const double LR = 1e-2, BETA1 = 0.9, BETA2 = 0.999, EPS = 1e-8;

/* One model: the three projections and Adam's moments. */
typedef struct model {
    float w[3][N_W]; /* Wq, Wk, Wv: [D_MODEL][H·D] */
    double m[3][N_W], v[3][N_W];
    double loss[STEPS];
} model;

/* What a step needs on the host besides the model (shared by both). */
typedef struct scratch {
    uint16_t qkv[3][N_ACT];  /* bf16, (B, S, H, D) */
    double o[N_ACT];         /* the layer's output, as doubles */
    uint16_t o16[N_ACT];
    float lse[N_LSE];
    double g[N_ACT];         /* dL/dO times N_ACT */
    uint16_t g16[N_ACT];
    double grad[3][N_ACT];   /* dq, dk, dv (of N_ACT · L) */
    uint16_t grad16[3][N_ACT];
    double tmp[N_ACT];       /* one projection before rounding */
    double dw[N_W];          /* one weight gradient */
} scratch;

/* The problem and the GPU side of one pattern. */
typedef struct trainer {
    const s2_pattern *p;
    const double *x, *target;
    s2_ref_problem rp;
    s2_attn_kernel *fwd, *bwd;
    s2_devptr dqkv[3], dout, dlse, dgo, dgrad[3], dws;
    size_t dws_bytes;
    bool ds_path;
} trainer;

/* A flat view: element i is (0, 0, 0, i). */
static s2_tensor flat(void *data, s2_dtype dt)
{
    return (s2_tensor){data, dt, {0, 0, 0, 1}};
}

static void fill_random(void *data, s2_dtype dt, int64_t n, uint64_t seed, double lo, double hi)
{
    s2_tensor t = flat(data, dt);
    int64_t ext[4] = {1, 1, 1, n};
    s2_tensor_fill_random(&t, ext, seed, lo, hi);
}

static bool kept(const void *user, int q_head, int64_t qpos, int64_t kpos)
{
    return s2_token_kept((const s2_pattern *)user, q_head, qpos, kpos);
}

/* out[ROWS][HD] = x[ROWS][D_MODEL] · w[D_MODEL][HD], in double. */
static void project(const double *x, const float *w, double *out)
{
    for (int r = 0; r < ROWS; r++) {
        double *o = out + (size_t)r * HD;
        memset(o, 0, HD * sizeof *o);
        for (int j = 0; j < D_MODEL; j++) {
            double xj = x[(size_t)r * D_MODEL + j];
            for (int c = 0; c < HD; c++)
                o[c] += xj * w[(size_t)j * HD + c];
        }
    }
}

/* q, k, v of the model, rounded to bf16. */
static void project_qkv(const trainer *t, const model *m, scratch *s)
{
    for (int i = 0; i < 3; i++) {
        project(t->x, m->w[i], s->tmp);
        s2_tensor q = flat(s->qkv[i], DT);
        for (int64_t e = 0; e < N_ACT; e++)
            s2_tensor_set(&q, 0, 0, 0, e, s->tmp[e]);
    }
}

/* The loss of o and, in s->g, N_ACT times its gradient: the backward is
 * linear in dO, and unscaled values of ~1e-5 would lose bits in bf16
 * products for no reason. */
static double loss_and_grad(const trainer *t, scratch *s)
{
    double sum = 0;
    for (int64_t e = 0; e < N_ACT; e++) {
        double d = s->o[e] - t->target[e];
        sum += d * d;
        s->g[e] = 2 * d;
    }
    return sum / N_ACT;
}

/* dW = Xᵀ·dAct / N_ACT, then one Adam step on W. */
static void update(const trainer *t, model *m, int which, const double *dact, double *dw, int step)
{
    memset(dw, 0, N_W * sizeof *dw);
    for (int r = 0; r < ROWS; r++)
        for (int j = 0; j < D_MODEL; j++) {
            double xj = t->x[(size_t)r * D_MODEL + j];
            for (int c = 0; c < HD; c++)
                dw[(size_t)j * HD + c] += xj * dact[(size_t)r * HD + c];
        }
    double c1 = 1 - pow(BETA1, step + 1), c2 = 1 - pow(BETA2, step + 1);
    for (int i = 0; i < N_W; i++) {
        double g = dw[i] / N_ACT;
        m->m[which][i] = BETA1 * m->m[which][i] + (1 - BETA1) * g;
        m->v[which][i] = BETA2 * m->v[which][i] + (1 - BETA2) * g * g;
        m->w[which][i] -= (float)(LR * (m->m[which][i] / c1) / (sqrt(m->v[which][i] / c2) + EPS));
    }
}

static void update_all(const trainer *t, model *m, scratch *s, int step)
{
    for (int i = 0; i < 3; i++)
        update(t, m, i, s->grad[i], s->dw, step);
}

/* One step of the reference model, everything after the rounding of q, k, v in float64. */
static s2_status ref_step(s2_ctx *ctx, const trainer *t, model *m, scratch *s, int step)
{
    project_qkv(t, m, s);
    s2_tensor q = s2_tensor_bshd(s->qkv[0], DT, S, H, D), k = s2_tensor_bshd(s->qkv[1], DT, S, H, D),
              v = s2_tensor_bshd(s->qkv[2], DT, S, H, D), o = s2_tensor_bshd(s->o, S2_DTYPE_F64, S, H, D),
              g = s2_tensor_bshd(s->g, S2_DTYPE_F64, S, H, D);
    s2_status st = s2_ref_forward(ctx, &t->rp, &q, &k, &v, &o, s->lse);
    if (st != S2_OK)
        return st;
    m->loss[step] = loss_and_grad(t, s);
    s2_tensor dq = s2_tensor_bshd(s->grad[0], S2_DTYPE_F64, S, H, D),
              dk = s2_tensor_bshd(s->grad[1], S2_DTYPE_F64, S, H, D),
              dv = s2_tensor_bshd(s->grad[2], S2_DTYPE_F64, S, H, D);
    if ((st = s2_ref_backward(ctx, &t->rp, &q, &k, &v, &o, &g, s->lse, NULL, &dq, &dk, &dv)) != S2_OK)
        return st;
    update_all(t, m, s, step);
    return S2_OK;
}

static void to_double(const uint16_t *src, double *dst)
{
    s2_tensor t = flat((void *)src, DT);
    for (int64_t e = 0; e < N_ACT; e++)
        dst[e] = s2_tensor_get(&t, 0, 0, 0, e);
}

/* One step of the GPU model: projections on the host, attention forward and
 * backward on the device, o and the gradients coming back in bf16. */
static s2_status gpu_step(s2_ctx *ctx, s2_device *dev, const trainer *t, model *m, scratch *s, int step)
{
    const size_t act_bytes = N_ACT * 2;
    project_qkv(t, m, s);
    s2_status st = S2_OK;
    for (int i = 0; i < 3 && st == S2_OK; i++)
        st = s2_memcpy_h2d(ctx, dev, t->dqkv[i], s->qkv[i], act_bytes);
    s2_attn_fwd_args fa = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = H, .head_dim = D,
                           .dtype = DT, .q = t->dqkv[0], .k = t->dqkv[1], .v = t->dqkv[2], .o = t->dout,
                           .lse = t->dlse};
    s2_attn_fwd_args_bshd(&fa);
    if (st == S2_OK)
        st = s2_attn_forward(ctx, t->fwd, NULL, &fa);
    if (st == S2_OK)
        st = s2_memcpy_d2h(ctx, dev, s->o16, t->dout, act_bytes); /* synchronous: waits for the forward */
    if (st != S2_OK)
        return st;
    to_double(s->o16, s->o);
    m->loss[step] = loss_and_grad(t, s);
    s2_tensor g16 = flat(s->g16, DT);
    for (int64_t e = 0; e < N_ACT; e++)
        s2_tensor_set(&g16, 0, 0, 0, e, s->g[e]);
    if ((st = s2_memcpy_h2d(ctx, dev, t->dgo, s->g16, act_bytes)) != S2_OK)
        return st;
    s2_attn_bwd_args ba = {.batch = B, .q_len = S, .kv_len = S, .heads = H, .kv_heads = H, .head_dim = D,
                           .dtype = DT, .q = t->dqkv[0], .k = t->dqkv[1], .v = t->dqkv[2], .o = t->dout,
                           .d_o = t->dgo, .lse = t->dlse, .dq = t->dgrad[0], .dk = t->dgrad[1],
                           .dv = t->dgrad[2], .workspace = t->dws, .workspace_bytes = t->dws_bytes};
    s2_attn_bwd_args_bshd(&ba);
    if ((st = s2_attn_backward(ctx, t->bwd, NULL, &ba)) != S2_OK)
        return st;
    for (int i = 0; i < 3 && st == S2_OK; i++)
        st = s2_memcpy_d2h(ctx, dev, s->grad16[i], t->dgrad[i], act_bytes);
    if (st != S2_OK)
        return st;
    for (int i = 0; i < 3; i++)
        to_double(s->grad16[i], s->grad[i]);
    update_all(t, m, s, step);
    return S2_OK;
}

static s2_status trainer_open(s2_ctx *ctx, s2_device *dev, trainer *t)
{
    s2_jit_opts opts = {.no_cache = true};
    s2_kernel_spec fs = {.kind = S2_KERNEL_FWD, .dtype = DT, .head_dim = D};
    s2_kernel_spec bs = {.kind = S2_KERNEL_BWD, .dtype = DT, .head_dim = D};
    s2_status st = s2_jit_compile(ctx, dev, t->p, &fs, &opts, &t->fwd, NULL);
    if (st == S2_OK)
        st = s2_jit_compile(ctx, dev, t->p, &bs, &opts, &t->bwd, NULL);
    s2_devptr *acts[] = {&t->dqkv[0], &t->dqkv[1], &t->dqkv[2], &t->dout, &t->dgo,
                         &t->dgrad[0], &t->dgrad[1], &t->dgrad[2]};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0] && st == S2_OK; i++)
        st = s2_mem_alloc(ctx, dev, N_ACT * 2, acts[i]);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, N_LSE * 4, &t->dlse);
    if (st == S2_OK)
        st = s2_attn_backward_workspace(ctx, t->bwd, B, S, S, &t->dws_bytes, &t->ds_path);
    if (st == S2_OK)
        st = s2_mem_alloc(ctx, dev, t->dws_bytes, &t->dws);
    return st;
}

static void trainer_close(s2_ctx *ctx, s2_device *dev, trainer *t)
{
    s2_devptr d[] = {t->dqkv[0], t->dqkv[1], t->dqkv[2], t->dout, t->dgo,
                     t->dgrad[0], t->dgrad[1], t->dgrad[2], t->dlse, t->dws};
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        s2_mem_free(ctx, dev, d[i]);
    s2_attn_kernel_free(t->fwd);
    s2_attn_kernel_free(t->bwd);
}

/* Both models from the same initial weights, STEPS steps each in lockstep;
 * prints the curves and adds the failed checks to *failed. */
static s2_status train_pattern(s2_ctx *ctx, s2_device *dev, trainer *t, model *gm, model *rm, scratch *s,
                               const model *init, int *failed)
{
    s2_status st = trainer_open(ctx, dev, t);
    memcpy(gm, init, sizeof *gm);
    memcpy(rm, init, sizeof *rm);
    printf("\n%s (block %d, %s, backward %s):\n%5s %12s %12s %10s\n", t->p->name, t->p->block_size,
           t->p->causal ? "causal" : "bidirectional", t->ds_path ? "with the dS workspace" : "recomputing dQ",
           "step", "loss GPU", "loss ref", "rel diff");
    int bad = 0;
    for (int i = 0; i < STEPS && st == S2_OK; i++) {
        if ((st = gpu_step(ctx, dev, t, gm, s, i)) == S2_OK)
            st = ref_step(ctx, t, rm, s, i);
        if (st != S2_OK)
            break;
        double rel = fabs(gm->loss[i] - rm->loss[i]) / rm->loss[i];
        bool ok = rel <= LOSS_TOL;
        bad += !ok;
        printf("%5d %12.6f %12.6f %10.2e%s\n", i, gm->loss[i], rm->loss[i], rel, ok ? "" : "  FAIL");
    }
    if (st == S2_OK) {
        bool dropped = gm->loss[STEPS - 1] <= (1 - MIN_DROP) * gm->loss[0] &&
                       rm->loss[STEPS - 1] <= (1 - MIN_DROP) * rm->loss[0];
        printf("%s: %d step(s) off by more than %.0e; loss %.4f -> %.4f (GPU), %.4f -> %.4f (ref)%s\n",
               t->p->name, bad, LOSS_TOL, gm->loss[0], gm->loss[STEPS - 1], rm->loss[0], rm->loss[STEPS - 1],
               dropped ? "" : ": FAIL, fell by less than 20%");
        *failed += bad + !dropped;
    }
    trainer_close(ctx, dev, t);
    return st;
}

/* X, the initial weights and the target: what a teacher with other weights
 * outputs under dense causal attention (float64). */
static s2_status make_data(s2_ctx *ctx, uint64_t seed, double *x, double *target, model *init, scratch *s)
{
    /* Var(X·W) = D_MODEL · (1/3) · (a²/3): a = 0.3 gives q, k, v of about unit size */
    fill_random(x, S2_DTYPE_F64, N_X, seed, -1, 1);
    for (int i = 0; i < 3; i++)
        fill_random(init->w[i], S2_DTYPE_F32, N_W, seed + 1 + (uint64_t)i, -0.3, 0.3);
    model *teacher = calloc(1, sizeof *teacher);
    if (!teacher)
        return S2_ERR_NOMEM;
    for (int i = 0; i < 3; i++)
        fill_random(teacher->w[i], S2_DTYPE_F32, N_W, seed + 11 + (uint64_t)i, -0.3, 0.3);
    trainer t = {.x = x,
                 .rp = {.batch = B, .heads = H, .kv_heads = H, .head_dim = D, .q_len = S, .kv_len = S,
                        .causal = true}};
    project_qkv(&t, teacher, s);
    free(teacher);
    s2_tensor q = s2_tensor_bshd(s->qkv[0], DT, S, H, D), k = s2_tensor_bshd(s->qkv[1], DT, S, H, D),
              v = s2_tensor_bshd(s->qkv[2], DT, S, H, D), o = s2_tensor_bshd(target, S2_DTYPE_F64, S, H, D);
    return s2_ref_forward(ctx, &t.rp, &q, &k, &v, &o, NULL);
}

int main(int argc, char **argv)
{
    const char *file = argc > 1 ? argv[1] : TRAIN_PATTERN_FILE;
    s2_ctx *ctx = s2_ctx_new();
    s2_device *dev = NULL;
    s2_pattern_set *set = NULL;
    double *x = malloc(N_X * sizeof *x), *target = malloc(N_ACT * sizeof *target);
    model *init = calloc(1, sizeof *init), *gm = malloc(sizeof *gm), *rm = malloc(sizeof *rm);
    scratch *s = malloc(sizeof *s);
    s2_status st = S2_OK;
    int rc = 1;
    if (!ctx || !x || !target || !init || !gm || !rm || !s)
        goto done;
    if ((rc = ex_open_device(ctx, &dev)) != 0)
        goto done;
    if ((st = s2_pattern_load(ctx, file, &set)) != S2_OK)
        goto fail;
    uint64_t seed = ex_seed();
    const s2_device_info *in = s2_device_get_info(dev);
    printf("%s (cc %d.%d), %s: B=%d S=%d H=%d D=%d D_model=%d, bf16, Adam lr %g, %d steps, seed %llu "
           "(S2C_SEED to repeat)\n", in->name, in->cc_major, in->cc_minor, file, B, S, H, D, D_MODEL, LR, STEPS,
           (unsigned long long)seed);
    if ((st = make_data(ctx, seed, x, target, init, s)) != S2_OK)
        goto fail;

    int failed = 0;
    for (int i = 0; i < s2_pattern_set_count(set); i++) {
        const s2_pattern *p = s2_pattern_set_get(set, i);
        if (p->heads != H || p->kv_heads != H) {
            printf("%s: the toy layer has %d heads and kv-heads, the pattern %d and %d\n", p->name, H, p->heads,
                   p->kv_heads);
            rc = 1;
            goto done;
        }
        trainer t = {.p = p, .x = x, .target = target,
                     .rp = {.batch = B, .heads = H, .kv_heads = H, .head_dim = D, .q_len = S, .kv_len = S,
                            .causal = p->causal, .mask = kept, .mask_user = p}};
        if ((st = train_pattern(ctx, dev, &t, gm, rm, s, init, &failed)) != S2_OK)
            goto fail;
    }
    printf("%s\n", failed ? "FAIL" : "PASS");
    rc = failed ? 1 : 0;
    goto done;
fail:
    printf("error: %s (%s)\n", s2_ctx_message(ctx), s2_status_name(st));
    rc = 1;
done:
    free(x);
    free(target);
    free(init);
    free(gm);
    free(rm);
    free(s);
    s2_pattern_set_free(set);
    s2_device_free(dev);
    s2_ctx_free(ctx);
    return rc;
}
