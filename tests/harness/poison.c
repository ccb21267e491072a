#include "poison.h"

#include <check.h>
#include <stdlib.h>

#define OK(ctx, call) ck_assert_msg((call) == S2_OK, "%s: %s", #call, s2_ctx_message(ctx))

void *s2t_alloc_poisoned(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    memset(p, S2T_POISON_BYTE, bytes);
    return p;
}

void s2t_dev_poison(s2_ctx *ctx, s2_device *dev, s2_devptr p, size_t bytes)
{
    OK(ctx, s2_memset_d8(ctx, dev, p, S2T_POISON_BYTE, bytes));
}

s2_devptr s2t_dev_alloc_poisoned(s2_ctx *ctx, s2_device *dev, size_t bytes)
{
    s2_devptr p = 0;
    OK(ctx, s2_mem_alloc(ctx, dev, bytes, &p));
    s2t_dev_poison(ctx, dev, p, bytes);
    return p;
}

void s2t_strides(bool bhsd, int64_t seq, int64_t heads, int64_t dim, int64_t pad, int64_t st[4])
{
    if (bhsd)
        st[0] = heads * seq * (dim + pad), st[1] = dim + pad, st[2] = seq * (dim + pad), st[3] = 1;
    else
        st[0] = seq * (heads * dim + pad), st[1] = heads * dim + pad, st[2] = dim, st[3] = 1;
}

size_t s2t_span(const int64_t st[4], const int64_t ext[4])
{
    int64_t last = 0;
    for (int i = 0; i < 4; i++)
        last += (ext[i] - 1) * st[i];
    return (size_t)last + 1;
}

void s2t_tensor_new(s2t_tensor *x, s2_dtype dt, bool bhsd, int64_t b, int64_t s, int64_t h, int64_t d, int64_t pad)
{
    int64_t st[4];
    s2t_strides(bhsd, s, h, d, pad, st);
    x->ext[0] = b, x->ext[1] = s, x->ext[2] = h, x->ext[3] = d;
    x->elems = s2t_span(st, x->ext) + (size_t)pad;
    x->host = s2t_alloc_poisoned(x->elems * s2_dtype_size(dt));
    x->t = (s2_tensor){x->host, dt, {st[0], st[1], st[2], st[3]}};
    x->dev = 0;
}

/* bytes of the host and device copies: elements of the tensor's dtype (2 or 4 bytes) */
static size_t tensor_bytes(const s2t_tensor *x) { return x->elems * s2_dtype_size(x->t.dtype); }

void s2t_tensor_poison(s2t_tensor *x) { s2t_poison16(x->host, tensor_bytes(x) / 2); }

int64_t s2t_tensor_pad_written(const s2t_tensor *x)
{
    uint8_t *inside = calloc(x->elems, 1);
    ck_assert_ptr_nonnull(inside);
    const int64_t *e = x->ext, *st = x->t.stride;
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t s = 0; s < e[1]; s++)
            for (int64_t h = 0; h < e[2]; h++)
                memset(inside + b * st[0] + s * st[1] + h * st[2], 1, (size_t)e[3]);
    int64_t n = 0;
    size_t halves = s2_dtype_size(x->t.dtype) / 2;   /* 16-bit words per element */
    for (size_t i = 0; i < x->elems; i++)
        for (size_t j = 0; j < halves; j++)
            if (!inside[i] && x->host[i * halves + j] != S2T_POISON16) {
                n++;
                break;
            }
    free(inside);
    return n;
}

void s2t_tensor_upload(s2_ctx *ctx, s2_device *dev, s2t_tensor *x)
{
    if (!x->dev)
        OK(ctx, s2_mem_alloc(ctx, dev, tensor_bytes(x), &x->dev));
    OK(ctx, s2_memcpy_h2d(ctx, dev, x->dev, x->host, tensor_bytes(x)));
}

void s2t_tensor_download(s2_ctx *ctx, s2_device *dev, s2t_tensor *x)
{
    OK(ctx, s2_memcpy_d2h(ctx, dev, x->host, x->dev, tensor_bytes(x)));
}

void s2t_tensor_free(s2_ctx *ctx, s2_device *dev, s2t_tensor *x)
{
    if (x->dev)
        s2_mem_free(ctx, dev, x->dev);
    free(x->host);
    x->host = NULL;
    x->dev = 0;
}
