/* Control surface of the fake libcuda used by test_runtime (looked up with
 * dlsym in the same loaded copy the runtime uses). */
#ifndef S2C_FAKE_CUDA_H
#define S2C_FAKE_CUDA_H

/* Keys of fake_cuda_set / fake_cuda_get (see fake_cuda.c for meanings). */
typedef void (*fake_cuda_set_fn)(const char *key, long long value);
typedef long long (*fake_cuda_get_fn)(const char *key);
typedef const char *(*fake_cuda_last_image_fn)(void);
/* The driver calls made since fake_cuda_set("trace", 1), comma-separated names without "cu". */
typedef const char *(*fake_cuda_trace_fn)(void);
/* Declare the next launches' parameter sizes; the bytes of the last launch
 * (key last_params_bytes of them) are then at fake_cuda_last_params(). */
typedef void (*fake_cuda_param_sizes_fn)(const int *sizes, int n);
typedef const unsigned char *(*fake_cuda_last_params_fn)(void);
/* While recording: shape {grid xyz, block xyz, smem, parameter bytes} and
 * parameter bytes of the back-th launch before the last (0 = the last). */
typedef const unsigned char *(*fake_cuda_launch_at_fn)(int back, long long shape[8]);

/* The calling thread's own launches (the calls above see every thread's):
 * fake_cuda_thread_param_sizes declares the parameter sizes recorded for
 * this thread's next launches (n = 0 records none), and
 * fake_cuda_thread_last_launch gives this thread's last successful launch. */
enum { FAKE_CUDA_PARAM_BYTES = 2048 };
typedef struct fake_cuda_launch {
    long long launches;                 /* this thread's successful launches so far */
    long long grid[3], block[3], smem;
    void *stream;
    long long params_bytes;
    unsigned char params[FAKE_CUDA_PARAM_BYTES];
} fake_cuda_launch;
typedef void (*fake_cuda_thread_param_sizes_fn)(const int *sizes, int n);
typedef const fake_cuda_launch *(*fake_cuda_thread_last_launch_fn)(void);

#endif
