/* Smoke test of the riscv64 toolchain: sum an array with RVV intrinsics, print VLEN.
 * Built with -DRVV_ZVFH it sums fp16 data doubled with Zvfh arithmetic (vfadd on f16). */
#include <riscv_vector.h>
#include <stdio.h>

#define N 1001

int main(void)
{
    size_t vlen = __riscv_vsetvlmax_e8m1() * 8;
    float expect = 0.0f;
    vfloat32m1_t acc = __riscv_vfmv_v_f_f32m1(0.0f, 1);
#ifdef RVV_ZVFH
    static _Float16 x[N];
    for (int i = 0; i < N; i++) {
        x[i] = (_Float16)((i % 64) * 0.25f);
        expect += 2.0f * (float)x[i];
    }
    const _Float16 *p = x;
    for (size_t n = N, vl; n > 0; n -= vl, p += vl) {
        vl = __riscv_vsetvl_e16m1(n);
        vfloat16m1_t v = __riscv_vle16_v_f16m1(p, vl);
        v = __riscv_vfadd_vv_f16m1(v, v, vl);                       /* Zvfh */
        vfloat32m2_t w = __riscv_vfwcvt_f_f_v_f32m2(v, vl);         /* Zvfhmin */
        acc = __riscv_vfredusum_vs_f32m2_f32m1(w, acc, vl);
    }
    const char *kind = "fp16";
#else
    static float x[N];
    for (int i = 0; i < N; i++) {
        x[i] = (float)(i % 64) * 0.25f;
        expect += x[i];
    }
    const float *p = x;
    for (size_t n = N, vl; n > 0; n -= vl, p += vl) {
        vl = __riscv_vsetvl_e32m1(n);
        acc = __riscv_vfredusum_vs_f32m1_f32m1(__riscv_vle32_v_f32m1(p, vl), acc, vl);
    }
    const char *kind = "fp32";
#endif
    float sum = __riscv_vfmv_f_s_f32m1_f32(acc);
    printf("%s VLEN=%zu sum=%g expect=%g %s\n", kind, vlen, sum, expect,
           sum == expect ? "OK" : "MISMATCH");
    return sum == expect ? 0 : 1;
}
