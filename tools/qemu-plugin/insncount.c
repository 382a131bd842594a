/*
 * insncount: a QEMU TCG plugin counting retired RISC-V instructions, split into scalar and
 * vector (RVV) ones. Written for the plugin API of QEMU 7.2 (Debian 12's qemu-user).
 *
 * Classification by major opcode (bits 6..0) of 32-bit instructions:
 *   OP-V     0x57: vector arithmetic and configuration; funct3 == 7 is vsetvli/vsetivli/vsetvl
 *   LOAD-FP  0x07 / STORE-FP 0x27 with width (funct3) 0, 5, 6 or 7: vector loads/stores
 *   everything else, including all 16-bit (compressed) instructions: scalar
 * vector = OP-V + vector memory; vsetvl and vmem are sub-counts of vector.
 *
 * Counting is per translation block: at translation time the instructions of the block are
 * classified once, and an inline add per class is attached to the block's execution, so the
 * run-time cost is a few adds per executed block. A block left early (a trap in its middle)
 * is counted whole; inline adds are not atomic, so counts of multi-threaded guests are
 * approximate.
 *
 * Usage: qemu-riscv64 ... -plugin libinsncount.so,outfile=PATH ./prog
 * At exit one line "insncount total=N scalar=N vector=N vsetvl=N vmem=N" is written to PATH
 * (to stderr without outfile=).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <glib.h>
#include <qemu-plugin.h>

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

enum { SCALAR, VECTOR, VSETVL, VMEM, NCLASS };

static uint64_t counts[NCLASS];
static char *outfile;

/* Add to n[] the classes instruction INSN (SIZE bytes) belongs to. */
static void classify(const uint8_t *insn, size_t size, uint64_t n[NCLASS])
{
    uint32_t word, opcode, funct3;

    if (size != 4) {
        n[SCALAR]++;
        return;
    }
    memcpy(&word, insn, sizeof(word)); /* RISC-V and the x86-64 host are little-endian */
    opcode = word & 0x7f;
    funct3 = (word >> 12) & 0x7;
    if (opcode == 0x57) {
        n[VECTOR]++;
        if (funct3 == 7) {
            n[VSETVL]++;
        }
    } else if ((opcode == 0x07 || opcode == 0x27) &&
               (funct3 == 0 || funct3 >= 5)) {
        n[VECTOR]++;
        n[VMEM]++;
    } else {
        n[SCALAR]++;
    }
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    uint64_t n[NCLASS] = {0};
    size_t i, ninsns = qemu_plugin_tb_n_insns(tb);

    for (i = 0; i < ninsns; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        classify(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn), n);
    }
    for (i = 0; i < NCLASS; i++) {
        if (n[i]) {
            qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                                     &counts[i], n[i]);
        }
    }
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    FILE *f = outfile ? fopen(outfile, "w") : stderr;

    if (!f) {
        fprintf(stderr, "insncount: cannot write %s\n", outfile);
        return;
    }
    fprintf(f, "insncount total=%" PRIu64 " scalar=%" PRIu64 " vector=%" PRIu64
               " vsetvl=%" PRIu64 " vmem=%" PRIu64 "\n",
            counts[SCALAR] + counts[VECTOR], counts[SCALAR], counts[VECTOR],
            counts[VSETVL], counts[VMEM]);
    if (f != stderr) {
        fclose(f);
    }
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info,
                                           int argc, char **argv)
{
    int i;

    for (i = 0; i < argc; i++) {
        if (g_str_has_prefix(argv[i], "outfile=")) {
            g_free(outfile);
            outfile = g_strdup(argv[i] + strlen("outfile="));
        } else {
            fprintf(stderr, "insncount: unknown argument '%s' (want outfile=PATH)\n", argv[i]);
            return -1;
        }
    }
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
