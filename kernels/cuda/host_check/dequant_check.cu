// Runs the CUDA kernels' element loaders (load_elem in ../common.cuh, the
// code get_rows, mul_mat, flash_attn_ext and cpy read weights and caches
// with) on the host, so that their block decoding is tested without a GPU:
//   dequant_check TYPE N IN OUT
// reads N elements' worth of TYPE rows from IN and writes N f32 to OUT.
// tests/cuda_build_test.ts compares OUT with the CPU library's dequantizer.
// Not part of libllm_edge_cuda.so.
#include <stdio.h>
#include <stdlib.h>

#include "../common.cuh"

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: dequant_check TYPE N IN OUT\n");
    return 2;
  }
  const int type = atoi(argv[1]);
  const long n = atol(argv[2]);
  FILE *in = fopen(argv[3], "rb");
  if (!in) return 3;
  fseek(in, 0, SEEK_END);
  const long size = ftell(in);
  fseek(in, 0, SEEK_SET);
  char *row = (char *)malloc(size + 1);
  float *out = (float *)malloc(sizeof(float) * (n + 1));
  if (!row || !out || fread(row, 1, size, in) != (size_t)size) return 4;
  fclose(in);
  if (!weight_type(type)) return 5;
  for (long k = 0; k < n; k++) out[k] = load_elem(row, type, k);
  FILE *o = fopen(argv[4], "wb");
  if (!o || fwrite(out, sizeof(float), n, o) != (size_t)n) return 6;
  fclose(o);
  return 0;
}
