//! The histogram's composed forms: the relative inputs of logaddexp and hypot ([`Relative`]) and
//! the sorted general rule's value adjoint, from the sort, gathers and segmented scans. Each is a
//! device's default and the reference its fused kernel is tested against.

use crate::{BinaryOp, HistOp, Ops, OutOfRange, Result, RuleKernels, ScanSpec, TensorMeta, UnaryOp};

/// How logaddexp and hypot are differentiated: on each bin's inputs relative to its largest, m.
/// logaddexp is translation-equivariant (`hist = m + hist_rel` with inputs x - m) and hypot
/// scale-equivariant (`hist = m hist_rel` with inputs x / m, m the largest magnitude), and their
/// partials are invariant, so every rule and the forward rule give the same derivatives on the
/// relative inputs, where no fold value is large: a running fold at 1e16 rounds 1e16 + log 2 to
/// 1e16 and would weigh three tied logaddexp inputs 1/4, 1/2, 1/2 instead of 1/3 each, and
/// hypot's a / t at an infinite t is inf / inf. The definition at the extremes (guide, Histogram rules):
/// the inputs equal to m relative to +inf are 0 (logaddexp) or +-1 (hypot) and the rest -inf or
/// 0, so infinite inputs tie at the top and split the adjoint, and finite ones get 0; a
/// logaddexp bin of -inf only keeps its inputs (it stays -inf, with zero adjoints), a hypot bin
/// of zeros too; a NaN input makes m, and so every relative input of its bin, NaN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Relative {
    /// x - m (logaddexp).
    Shift,
    /// x / m, m the largest magnitude (hypot).
    Scale,
}

impl Relative {
    /// The relative form `op` is differentiated in, if any.
    pub fn of(op: HistOp) -> Option<Relative> {
        let g = op.general()?;
        if std::ptr::eq(g, &crate::general::LOGADDEXP) {
            Some(Relative::Shift)
        } else if std::ptr::eq(g, &crate::general::HYPOT) {
            Some(Relative::Scale)
        } else {
            None
        }
    }

    /// `(anchor, dest_rel, vals_rel)`: anchor (`[k]`) m, or the neutral shift (0) or scale (1)
    /// where m is logaddexp's -inf or hypot's 0, and each input relative to its bin's anchor.
    #[allow(clippy::type_complexity)]
    pub fn inputs<B: Ops>(self, b: &B, dest: &B::T, inds: &B::I, vals: &B::T) -> Result<(B::T, B::T, B::T)> {
        if let Some(fused) = b.relative_inputs(self, dest, inds, vals)? {
            return Ok(fused);
        }
        self.composed_inputs(b, dest, inds, vals)
    }

    /// The relative inputs `(anchor, dest_rel, vals_rel)` composed of elementwise ops: the
    /// definition, and the path of every device without a fused kernel
    /// (`HistOps::relative_inputs`).
    #[allow(clippy::type_complexity)]
    pub fn composed_inputs<B: Ops>(self, b: &B, dest: &B::T, inds: &B::I, vals: &B::T) -> Result<(B::T, B::T, B::T)> {
        let (dt, k) = (dest.dtype(), dest.numel());
        let scalar = |x: f64| b.scalar(x, dt);
        let (dest_flat, vals_flat) = (b.reshape(dest, &[k])?, b.reshape(vals, &[vals.numel()])?);
        let (m, empty, neutral) = match self {
            Relative::Shift => (b.reduce_by_index(&dest_flat, HistOp::Max, inds, &vals_flat)?, f64::NEG_INFINITY, 0.0),
            Relative::Scale => {
                let abs = |x: &B::T| b.unary(UnaryOp::Abs, x);
                (b.reduce_by_index(&abs(&dest_flat)?, HistOp::Max, inds, &abs(&vals_flat)?)?, 0.0, 1.0)
            }
        };
        let anchor = b.select(&b.binary(BinaryOp::Eq, &m, &scalar(empty)?)?, &scalar(neutral)?, &m)?;
        let relative = |x: &B::T, a: &B::T| -> Result<B::T> {
            match self {
                Relative::Shift => b.select(&b.binary(BinaryOp::Eq, x, a)?, &scalar(0.0)?, &b.sub(x, a)?),
                Relative::Scale => {
                    let top = b.binary(BinaryOp::Eq, &b.unary(UnaryOp::Abs, x)?, a)?;
                    b.select(&top, &b.unary(UnaryOp::Sign, x)?, &b.div(x, a)?)
                }
            }
        };
        let dest_rel = b.reshape(&relative(&dest_flat, &anchor)?, dest.shape())?;
        // Out-of-range elements read the neutral anchor; the histogram ignores them.
        let vals_rel = relative(&vals_flat, &b.gather(&anchor, inds, OutOfRange::Fill(neutral))?)?;
        Ok((anchor, dest_rel, b.reshape(&vals_rel, vals.shape())?))
    }

    /// The histogram from the histogram of the relative inputs.
    pub fn result<B: Ops>(self, b: &B, anchor: &B::T, hist_rel: &B::T) -> Result<B::T> {
        let anchor = b.reshape(anchor, hist_rel.shape())?;
        match self {
            Relative::Shift => b.add(&anchor, hist_rel),
            Relative::Scale => b.mul(&anchor, hist_rel),
        }
    }
}

/// [`RuleKernels::sorted_vals_adjoint`] composed from the sort, gathers and segmented scans (its
/// default for devices without a fused kernel; also the reference the fused kernels are tested
/// against).
pub fn sorted_vals_adjoint_composed<B: RuleKernels>(
    b: &B,
    op: HistOp,
    inds: &B::I,
    vals: &B::T,
    dest: &B::T,
    hist_bar: &B::T,
) -> Result<B::T> {
    let (n, k) = (vals.numel(), dest.numel());
    let (perm, ranks) = b.sort_by_key_ranked(inds, k)?;
    let keys = b.gather_index(inds, &perm)?;
    let sorted = b.gather(vals, &perm, OutOfRange::Error)?;
    let before = b.scan(op, &sorted, ScanSpec::EXCLUSIVE, Some(&keys))?;
    let dest_of = b.gather(dest, &keys, OutOfRange::Fill(op.neutral()))?;
    let l = b.combine(op, &dest_of, &before)?;
    let r = b.scan(op, &sorted, ScanSpec::EXCLUSIVE.flipped(), Some(&keys))?;
    let g_of = b.gather(hist_bar, &keys, OutOfRange::Fill(0.0))?;
    let sorted_bar = b.fold_adjoint(op, &l, &sorted, &r, &g_of)?;
    let out = b.gather(&sorted_bar, &ranks, OutOfRange::Error)?;
    b.reshape(&out, &[n])
}
