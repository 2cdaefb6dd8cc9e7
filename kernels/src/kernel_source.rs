//! The one kernel source shared by the OpenCL and CUDA devices: `kernels/kernels/kernels.cl`
//! (OpenCL C dialect) behind a small prelude per platform and `atomics.h`. Sources are embedded
//! and concatenated (NVRTC cannot see embedded include files): defines for the element type, the index type and
//! the operator, then the prelude, the atomics and the kernels.

use crate::general::{self, GeneralOp};
use crate::{DType, HistOp, IndexDType};

pub const PRELUDE_OPENCL: &str = include_str!("../kernels/prelude_opencl.h");
pub const PRELUDE_CUDA: &str = include_str!("../kernels/prelude_cuda.h");
pub const ATOMICS: &str = include_str!("../kernels/atomics.h");
pub const KERNELS: &str = include_str!("../kernels/kernels.cl");

/// Which prelude a program is built with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Dialect {
    OpenCl,
    Cuda,
}

/// Every kernel in [`KERNELS`] (the f32-only packed arg-histogram kernels are listed by
/// [`kernel_names`]).
pub const COMMON_KERNELS: &[&str] = &[
    "fill",
    "fill_i64",
    "unary",
    "binary",
    "select_t",
    "index_eq",
    "combine",
    "fold_adjoint",
    "total_form_adjoint",
    "prod_vals_adjoint",
    "reduce_chunks",
    "gather",
    "gather_index",
    "widen_index",
    "narrow_index",
    "scatter_winner",
    "scatter_apply",
    "hist_atomic",
    "hist_local",
    "prod_nonzero",
    "arg_value_init",
    "arg_value",
    "arg_position",
    "arg_two_pass_final",
    "chunk_rows",
    "chunk_carries",
    "chunked_adjoint",
    "chunk_rows_group",
    "chunked_adjoint_group",
    "dual_rows",
    "dual_rows_group",
    "dual_merge",
    "radix_counts",
    "radix_totals",
    "radix_totals_scan",
    "radix_offsets",
    "radix_scatter",
    "scan_chunks",
    "scan_carries",
    "scan_fixup",
    "linrec_chunks",
    "linrec_carries",
    "linrec_fixup",
    "copy_range",
    "lstm_cell",
    "lstm_cell_vjp",
    "lstm_cell_jvp",
    "broadcast_orq",
    "sum_orq",
    "arg_axis",
    "matmul_tiled",
];

/// The kernels a program of `dtype` contains.
pub fn kernel_names(dtype: DType) -> Vec<&'static str> {
    let mut out = COMMON_KERNELS.to_vec();
    if dtype == DType::F32 {
        out.extend(["arg_packed_init", "arg_packed", "arg_packed_final"]);
    }
    out
}

/// The operator a program is built for: the general form of any operator (the special ones
/// share their general versions' expressions), so `add` and `general-add` share a program.
pub fn program_op(op: HistOp) -> &'static GeneralOp {
    general::as_general(op)
}

/// A C literal for an f64 value in the dtype (infinities through INFINITY).
fn literal(x: f64, dtype: DType) -> String {
    if x == f64::INFINITY {
        "INFINITY".into()
    } else if x == f64::NEG_INFINITY {
        "(-INFINITY)".into()
    } else if dtype == DType::F32 {
        format!("{:?}f", x as f32)
    } else {
        format!("{x:?}")
    }
}

/// The complete source of the program for (dtype, index dtype, operator) in a dialect.
pub fn program_source(dialect: Dialect, dtype: DType, index: IndexDType, op: &GeneralOp) -> String {
    let (t, f64_flag) = match dtype {
        DType::F32 => ("float", 0),
        DType::F64 => ("double", 1),
    };
    let idx_t = match index {
        IndexDType::I32 => "int",
        IndexDType::I64 => "i64",
    };
    let prelude = match dialect {
        Dialect::OpenCl => PRELUDE_OPENCL,
        Dialect::Cuda => PRELUDE_CUDA,
    };
    format!(
        "#define T {t}\n#define IDX_T {idx_t}\n#define USE_F64 {f64_flag}\n\
         #define OP_COMBINE_EXPR {}\n#define OP_D1_EXPR {}\n#define OP_D2_EXPR {}\n#define OP_TOTAL_EXPR {}\n\
         #define OP_NEUTRAL {}\n#define OP_CHAIN_ABSORBS {}\n/* operator: {} */\n{prelude}\n{ATOMICS}\n{KERNELS}\n",
        op.c.combine.replace('\n', " "),
        op.c.d1.replace('\n', " "),
        op.c.d2.replace('\n', " "),
        op.c.total.unwrap_or("((T)0)").replace('\n', " "),
        literal(op.neutral, dtype),
        // `*`'s chain products absorb (`Fold::chain` on the CPU).
        u8::from(std::ptr::eq(op, &general::MUL)),
        op.name,
    )
}
