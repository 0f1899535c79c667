/*
 * The CUDA backend's entry points in a build without CUDA (make CUDA=0, or no nvcc):
 * asking for it is a clear error, and the default device falls back to the CPU backend.
 */
#include "../gpt.h"

#include <stdio.h>

int gpt_cuda_backend_create(gpt_backend **out, int device, int allow_tf32)
{
    (void)device;
    (void)allow_tf32;
    *out = NULL;
    return GPT_ERR_BACKEND;
}

int gpt_cuda_backend_create_dtype(gpt_backend **out, int device, int allow_tf32,
                                  gpt_dtype dtype)
{
    (void)dtype;
    return gpt_cuda_backend_create(out, device, allow_tf32);
}

int gpt_cuda_backend_create_kernels(gpt_backend **out, int device, int allow_tf32, gpt_dtype dtype,
                                    const gpt_cuda_kernels *kernels)
{
    (void)kernels;
    return gpt_cuda_backend_create_dtype(out, device, allow_tf32, dtype);
}

int gpt_cuda_device_count(void)
{
    return 0;
}

int gpt_cuda_backend_pci_bus_id(const gpt_backend *be, char *buf, int len)
{
    (void)be;
    if (len > 0) buf[0] = '\0';
    return GPT_ERR_BACKEND;
}

void gpt_cuda_backend_destroy(gpt_backend *be)
{
    (void)be;
}

int gpt_cuda_versions(int *runtime, int *driver)
{
    *runtime = 0;
    *driver = 0;
    return GPT_ERR_BACKEND;
}

int gpt_cuda_device_name(int device, char *buf, int len)
{
    (void)device;
    if (len > 0) buf[0] = '\0';
    return GPT_ERR_BACKEND;
}
