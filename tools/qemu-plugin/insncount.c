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
 * EMUL histogram (for cycle models whose vector cost grows with the register group size):
 * every vector instruction other than vsetvl* also gets an execution callback that reads the
 * vtype in force on its vCPU and adds the instruction to one bucket of its effective LMUL,
 * the largest register group it reads or writes:
 *   arithmetic: LMUL; widening (vw*, vfw*, widening vfcvt) and narrowing (vn*, narrowing
 *     vfcvt) ops 2 x LMUL; mask-register logic, vmv.x.s / vfmv.f.s / vmv.s.x / vfmv.s.f /
 *     vcpop / vfirst 1; vmv<n>r.v n;
 *   memory: EEW / SEW x LMUL for the data (indexed: the larger of LMUL for the data and
 *     EEW / SEW x LMUL for the indices), times the number of fields for segment accesses;
 *     whole-register accesses the register count; vlm / vsm 1.
 * The vtype comes from the immediate of the last vsetvli / vsetivli the vCPU executed (the
 * only vtype source the plugin API of QEMU 7.2 exposes: it cannot read registers); vector
 * instructions that run after a register-form vsetvl (vtype unknown to the plugin) keep the
 * previous vtype and are also counted in "vtype_unknown". Buckets are EMUL 1/8 .. 8
 * ("emul_8th emul_4th emul_half emul1 emul2 emul4 emul8"); they sum to vector - vsetvl.
 * The callbacks slow the emulation of vector code down, not of scalar code.
 *
 * Marks (counts at chosen points of a run): a guest that calls lseek(-1, MARK_MAGIC, L),
 * which fails with EBADF and has no other effect, makes the plugin snapshot every count
 * under the label L (any integer >= 0). A program can then measure just a section of
 * itself, e.g. one decode step, without its start-up, whose count varies by ~1e6 from run
 * to run (addresses and hashing differ). In Python: os.lseek(-1, 0x696E73636E74, L),
 * catching the OSError. The snapshot is taken as the syscall is entered; the count of the
 * block holding the ecall is already in it.
 *
 * Usage: qemu-riscv64 ... -plugin libinsncount.so,outfile=PATH ./prog
 * At exit one line "insncount total=N scalar=N vector=N vsetvl=N vmem=N emul_8th=N
 * emul_4th=N emul_half=N emul1=N emul2=N emul4=N emul8=N vtype_unknown=N" is written to
 * PATH (to stderr without outfile=), after one line "insncount-mark label=L total=N ..."
 * (the same keys) per mark, in the order the marks were taken.
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

/* EMUL buckets: index = log2(EMUL) + 3, EMUL 1/8 .. 8. */
enum { NEMUL = 7 };
static const char *const emul_names[NEMUL] = {
    "emul_8th", "emul_4th", "emul_half", "emul1", "emul2", "emul4", "emul8",
};
static uint64_t emul_counts[NEMUL];
static uint64_t vtype_unknown;

/*
 * Per-vCPU vtype as set by the last vsetvli/vsetivli: log2(LMUL) (-3..3), log2(SEW / 8)
 * (0..3), and whether it came from a register-form vsetvl (unknown). Indexed by
 * vcpu_index modulo MAX_VCPUS (user mode: one vCPU per guest thread).
 */
enum { MAX_VCPUS = 1024 };
struct vstate {
    int8_t lmul_log2;
    int8_t sew_log2;
    uint8_t unknown;
};
static struct vstate vstates[MAX_VCPUS];

/*
 * What an instruction's EMUL depends on, fixed at translation:
 *   kind KIND_VSETVLI: vtype immediate in imm (lmul_log2 = imm & 7, sew_log2 = (imm >> 3) & 7)
 *   kind KIND_VSETVL:  register-form vsetvl (vtype unknown)
 *   kind KIND_LMUL:    EMUL = LMUL x 2^scale (scale 1: widening / narrowing)
 *   kind KIND_FIXED:   EMUL = 2^scale regardless of vtype
 *   kind KIND_MEM:     data EMUL = EEW / SEW x LMUL (EEW = 8 << eew_log2), times nfields
 *                      (rounded up to a power of two); indexed: max with LMUL
 */
enum { KIND_VSETVLI, KIND_VSETVL, KIND_LMUL, KIND_FIXED, KIND_MEM };
struct vdesc {
    uint8_t kind;
    int8_t scale;
    int8_t eew_log2;
    uint8_t nf_log2;
    uint8_t indexed;
    uint16_t imm;
};

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

static int log2_ceil(unsigned v)
{
    int r = 0;

    while ((1u << r) < v) {
        r++;
    }
    return r;
}

/*
 * Describe vector instruction WORD for the EMUL histogram; return 0 for instructions that
 * are not vector ones (nothing to describe).
 */
static int describe(uint32_t word, struct vdesc *d)
{
    uint32_t opcode = word & 0x7f, funct3 = (word >> 12) & 0x7;
    uint32_t funct6 = word >> 26, vs1 = (word >> 15) & 0x1f;

    memset(d, 0, sizeof(*d));
    if (opcode == 0x57) {
        if (funct3 == 7) {
            if ((word >> 31) == 0) { /* vsetvli: zimm[10:0] */
                d->kind = KIND_VSETVLI;
                d->imm = (word >> 20) & 0x7ff;
            } else if ((word >> 30) == 3) { /* vsetivli: zimm[9:0] */
                d->kind = KIND_VSETVLI;
                d->imm = (word >> 20) & 0x3ff;
            } else { /* vsetvl rd, rs1, rs2 */
                d->kind = KIND_VSETVL;
            }
            return 1;
        }
        d->kind = KIND_LMUL;
        switch (funct3) {
        case 0: /* OPIVV */
        case 3: /* OPIVI */
        case 4: /* OPIVX */
            if (funct6 >= 0x2c && funct6 <= 0x2f) { /* vnsrl vnsra vnclipu vnclip */
                d->scale = 1;
            } else if (funct6 == 0x27 && funct3 == 3) { /* vmv<nr>r.v: nr = simm5 + 1 */
                d->kind = KIND_FIXED;
                d->scale = (int8_t)log2_ceil(vs1 + 1);
            }
            break;
        case 2: /* OPMVV */
        case 6: /* OPMVX */
            if (funct6 >= 0x30) { /* vwadd*, vwsub*, vwmul*, vwmacc* */
                d->scale = 1;
            } else if (funct6 >= 0x18 && funct6 <= 0x1f && funct3 == 2) { /* vmand..vmxnor */
                d->kind = KIND_FIXED;
            } else if (funct6 == 0x10) { /* vmv.x.s vcpop vfirst / vmv.s.x */
                d->kind = KIND_FIXED;
            }
            break;
        case 1: /* OPFVV */
        case 5: /* OPFVF */
            if (funct6 >= 0x30) { /* vfwadd*, vfwsub*, vfwmul, vfwmacc*, vfwred* */
                d->scale = 1;
            } else if (funct6 == 0x12 && funct3 == 1 && vs1 >= 8) { /* widening/narrowing vfcvt */
                d->scale = 1;
            } else if (funct6 == 0x10) { /* vfmv.f.s / vfmv.s.f */
                d->kind = KIND_FIXED;
            }
            break;
        }
        return 1;
    }
    if ((opcode == 0x07 || opcode == 0x27) && (funct3 == 0 || funct3 >= 5)) {
        uint32_t mop = (word >> 26) & 3, nf = (word >> 29) + 1, lumop = (word >> 20) & 0x1f;

        d->kind = KIND_MEM;
        d->eew_log2 = (int8_t)(funct3 == 0 ? 0 : funct3 - 4);
        d->nf_log2 = (uint8_t)log2_ceil(nf);
        d->indexed = (mop & 1) != 0;
        if (mop == 0 && lumop == 0x08) { /* whole-register load/store: nf registers */
            d->kind = KIND_FIXED;
            d->scale = (int8_t)d->nf_log2;
        } else if (mop == 0 && lumop == 0x0b) { /* vlm.v / vsm.v */
            d->kind = KIND_FIXED;
        }
        return 1;
    }
    return 0;
}

/* The one stored copy of descriptor D (callbacks keep pointers to it). */
static GHashTable *descs;
static GMutex descs_lock;

static struct vdesc *intern(const struct vdesc *d)
{
    uint64_t key = (uint64_t)d->kind | (uint64_t)(uint8_t)d->scale << 8 |
                   (uint64_t)(uint8_t)d->eew_log2 << 16 | (uint64_t)d->nf_log2 << 24 |
                   (uint64_t)d->indexed << 32 | (uint64_t)d->imm << 40;
    struct vdesc *found;

    g_mutex_lock(&descs_lock);
    if (!descs) {
        descs = g_hash_table_new(g_int64_hash, g_int64_equal);
    }
    found = g_hash_table_lookup(descs, &key);
    if (!found) {
        uint64_t *stored_key = g_new(uint64_t, 1);

        *stored_key = key;
        found = g_new(struct vdesc, 1);
        *found = *d;
        g_hash_table_insert(descs, stored_key, found);
    }
    g_mutex_unlock(&descs_lock);
    return found;
}

static void vector_exec(unsigned int vcpu_index, void *userdata)
{
    const struct vdesc *d = userdata;
    struct vstate *st = &vstates[vcpu_index % MAX_VCPUS];
    int emul;

    switch (d->kind) {
    case KIND_VSETVLI:
        /* vlmul is a 3-bit two's-complement log2 (4, reserved, reads as 1/16: clamped) */
        st->lmul_log2 = (int8_t)((d->imm & 7) >= 4 ? (int)(d->imm & 7) - 8 : (int)(d->imm & 7));
        st->sew_log2 = (int8_t)((d->imm >> 3) & 7);
        st->unknown = 0;
        return;
    case KIND_VSETVL:
        st->unknown = 1;
        return;
    case KIND_FIXED:
        emul = d->scale;
        break;
    case KIND_LMUL:
        emul = st->lmul_log2 + d->scale;
        break;
    default: /* KIND_MEM */
        emul = d->eew_log2 - st->sew_log2 + st->lmul_log2;
        if (d->indexed && st->lmul_log2 > emul) {
            emul = st->lmul_log2;
        }
        emul += d->nf_log2;
        break;
    }
    if (emul < -3) {
        emul = -3;
    } else if (emul > 3) {
        emul = 3;
    }
    emul_counts[emul + 3]++;
    if (st->unknown) {
        vtype_unknown++;
    }
}

static void tb_trans(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
    uint64_t n[NCLASS] = {0};
    size_t i, ninsns = qemu_plugin_tb_n_insns(tb);

    for (i = 0; i < ninsns; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        const uint8_t *data = qemu_plugin_insn_data(insn);
        size_t size = qemu_plugin_insn_size(insn);
        struct vdesc d;
        uint32_t word;

        classify(data, size, n);
        if (size != 4) {
            continue;
        }
        memcpy(&word, data, sizeof(word));
        if (describe(word, &d)) {
            /* Descriptors are interned: one per distinct (kind, fields), never freed. */
            qemu_plugin_register_vcpu_insn_exec_cb(insn, vector_exec, QEMU_PLUGIN_CB_NO_REGS,
                                                   intern(&d));
        }
    }
    for (i = 0; i < NCLASS; i++) {
        if (n[i]) {
            qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64,
                                                     &counts[i], n[i]);
        }
    }
}

/* Marks: see the header comment. lseek is syscall 62 on riscv64 (the generic table). */
enum { NR_LSEEK = 62 };
static const uint64_t MARK_MAGIC = 0x696E73636E74ull; /* "inscnt" */

struct snapshot {
    uint64_t label;
    uint64_t counts[NCLASS];
    uint64_t emul[NEMUL];
    uint64_t vtype_unknown;
};

static GArray *marks; /* of struct snapshot */
static GMutex marks_lock;

static void take(struct snapshot *s, uint64_t label)
{
    s->label = label;
    memcpy(s->counts, counts, sizeof counts);
    memcpy(s->emul, emul_counts, sizeof emul_counts);
    s->vtype_unknown = vtype_unknown;
}

static void on_syscall(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, uint64_t a1,
                       uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                       uint64_t a7, uint64_t a8)
{
    struct snapshot s;

    if (num != NR_LSEEK || a1 != UINT64_MAX || a2 != MARK_MAGIC) {
        return;
    }
    take(&s, a3);
    g_mutex_lock(&marks_lock);
    g_array_append_val(marks, s);
    g_mutex_unlock(&marks_lock);
}

static void print(FILE *f, const char *head, const struct snapshot *s)
{
    int i;

    fprintf(f, "%s total=%" PRIu64 " scalar=%" PRIu64 " vector=%" PRIu64 " vsetvl=%" PRIu64
               " vmem=%" PRIu64,
            head, s->counts[SCALAR] + s->counts[VECTOR], s->counts[SCALAR], s->counts[VECTOR],
            s->counts[VSETVL], s->counts[VMEM]);
    for (i = 0; i < NEMUL; i++) {
        fprintf(f, " %s=%" PRIu64, emul_names[i], s->emul[i]);
    }
    fprintf(f, " vtype_unknown=%" PRIu64 "\n", s->vtype_unknown);
}

static void at_exit(qemu_plugin_id_t id, void *userdata)
{
    FILE *f = outfile ? fopen(outfile, "w") : stderr;
    struct snapshot end;
    char head[64];
    guint i;

    if (!f) {
        fprintf(stderr, "insncount: cannot write %s\n", outfile);
        return;
    }
    for (i = 0; i < marks->len; i++) {
        const struct snapshot *s = &g_array_index(marks, struct snapshot, i);
        snprintf(head, sizeof head, "insncount-mark label=%" PRIu64, s->label);
        print(f, head, s);
    }
    take(&end, 0);
    print(f, "insncount", &end);
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
    marks = g_array_new(FALSE, FALSE, sizeof(struct snapshot));
    qemu_plugin_register_vcpu_tb_trans_cb(id, tb_trans);
    qemu_plugin_register_vcpu_syscall_cb(id, on_syscall);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
