//! The kernel device's dense ops (broadcasts, matrix products, axis reductions, the LSTM cell):
//! [`DenseOps`] for [`KernelDevice`], each op one or a few launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> KernelDevice<R> {
    /// Copies `n` elements of `x` from `x_off` to `out` at `out_off` (a kernel: nothing crosses).
    pub(crate) fn copy_range(
        &self,
        dt: DType,
        out: &Buf<R>,
        out_off: usize,
        x: &Buf<R>,
        x_off: usize,
        n: usize,
    ) -> Result<()> {
        let args = [Arg::Buf(out), Arg::I64(out_off as i64), Arg::Buf(x), Arg::I64(x_off as i64), Arg::I64(n as i64)];
        self.launch(dt, ADD, "copy_range", n, &args)
    }

    /// Checks an LSTM cell's operands `[x, state, params]` and the tangents or adjoints that go
    /// with them (name, tensor, rows: 1 for `[b]`, else `[rows, b]`); returns their dtype and
    /// the width b.
    pub(crate) fn lstm_operands(
        &self,
        op: &'static str,
        [x, s, p]: [&GpuTensor<R>; 3],
        others: &[(&str, &GpuTensor<R>, usize)],
    ) -> Result<(DType, usize)> {
        let b = crate::shape::lstm_cell_width(op, &x.shape, &s.shape, &p.shape)?;
        same_dtype(op, x, s)?;
        same_dtype(op, x, p)?;
        for &(what, t, rows) in others {
            same_dtype(op, x, t)?;
            let want = if rows == 1 { vec![b] } else { vec![rows, b] };
            crate::shape::same_shape(op, what, &t.shape, &want)?;
        }
        self.rt.check_dtype(x.dtype)?;
        Ok((x.dtype, b))
    }
}

impl<R: KernelRuntime> DenseOps for KernelDevice<R> {
    fn lstm_cell(&self, x: &GpuTensor<R>, state: &GpuTensor<R>, params: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        let (dt, b) = self.lstm_operands("lstm_cell", [x, state, params], &[])?;
        let (out, shape) = self.new_tensor(vec![2, b], dt)?;
        let args = [Arg::Buf(&out), Arg::Buf(&x.buf), Arg::Buf(&state.buf), Arg::Buf(&params.buf), Arg::I64(b as i64)];
        self.launch(dt, ADD, "lstm_cell", b, &args)?;
        Ok(self.wrap(out, shape, dt))
    }

    fn broadcast_to(&self, x: &GpuTensor<R>, shape: &[usize]) -> Result<GpuTensor<R>> {
        let rs = shape::runs("broadcast_to", &x.shape, shape)?;
        let dt = x.dtype;
        self.rt.check_dtype(dt)?;
        let mut cur: Option<Buf<R>> = None;
        // One broadcast run at a time, innermost first: the runs inside it are already full
        // size, those outside it still have length 1 where they broadcast.
        for j in (0..rs.len()).rev().filter(|&j| rs[j].reduced) {
            let o: usize = rs[..j].iter().map(|r| if r.reduced { 1 } else { r.len }).product();
            let (r, q) = (rs[j].len, rs[j + 1..].iter().map(|r| r.len).product::<usize>());
            let n = o * r * q;
            let out = self.alloc(n, dt.size_bytes())?;
            let src = cur.as_ref().unwrap_or(&x.buf);
            self.launch(
                dt,
                ADD,
                "broadcast_orq",
                n,
                &[Arg::Buf(&out), Arg::Buf(src), Arg::I64(n as i64), Arg::I64(r as i64), Arg::I64(q as i64)],
            )?;
            cur = Some(out);
        }
        Ok(match cur {
            Some(b) => self.wrap(b, shape.to_vec(), dt),
            // Nothing broadcasts: the same elements (tensors are immutable, so they are shared).
            None => GpuTensor { buf: x.buf.clone(), shape: shape.to_vec(), dtype: dt },
        })
    }

    fn sum_to(&self, x: &GpuTensor<R>, shape: &[usize]) -> Result<GpuTensor<R>> {
        let rs = shape::runs("sum_to", shape, &x.shape)?;
        let dt = x.dtype;
        self.rt.check_dtype(dt)?;
        let mut lens: Vec<usize> = rs.iter().map(|r| r.len).collect();
        let mut cur: Option<Buf<R>> = None;
        // One summed run at a time, innermost first.
        for j in (0..rs.len()).rev().filter(|&j| rs[j].reduced) {
            let (o, r) = (lens[..j].iter().product::<usize>(), lens[j]);
            let q: usize = lens[j + 1..].iter().product();
            let src = cur.as_ref().unwrap_or(&x.buf);
            cur = Some(self.sum_orq(dt, src, o, r, q)?);
            lens[j] = 1;
        }
        Ok(match cur {
            Some(b) => self.wrap(b, shape.to_vec(), dt),
            None => GpuTensor { buf: x.buf.clone(), shape: shape.to_vec(), dtype: dt },
        })
    }

    fn matmul(&self, a: &GpuTensor<R>, ta: bool, b: &GpuTensor<R>, tb: bool) -> Result<GpuTensor<R>> {
        let dt = same_dtype("matmul", a, b)?;
        let p = shape::matmul_plan(&a.shape, ta, &b.shape, tb)?;
        let (out, shape) = self.new_tensor(p.out_shape.clone(), dt)?;
        if out.len == 0 {
            return Ok(self.wrap(out, shape, dt));
        }
        let ts = self.matmul_tile(dt);
        let (tiles_m, tiles_n) = (p.m.div_ceil(ts), p.n.div_ceil(ts));
        let per_batch = tiles_m * tiles_n;
        let (splits, kc) = matmul_splits(p.batch * per_batch, p.k);
        let partial = if splits > 1 { Some(self.alloc(splits * out.len, dt.size_bytes())?) } else { None };
        let stride = |batched: bool, len: usize| if batched { len as i64 } else { 0 };
        self.rt.launch(
            dt,
            ADD,
            IndexDType::I64,
            "matmul_tiled",
            splits * p.batch * per_batch * ts * ts,
            Some(ts * ts),
            &[
                Arg::Buf(partial.as_ref().unwrap_or(&out)),
                Arg::Buf(&a.buf),
                Arg::Buf(&b.buf),
                Arg::I64(p.m as i64),
                Arg::I64(p.k as i64),
                Arg::I64(p.n as i64),
                Arg::I64(stride(p.a_batched, p.m * p.k)),
                Arg::I64(stride(p.b_batched, p.k * p.n)),
                Arg::I32(i32::from(ta)),
                Arg::I32(i32::from(tb)),
                Arg::I64(p.batch as i64),
                Arg::I64(tiles_n as i64),
                Arg::I64(per_batch as i64),
                Arg::I64(kc as i64),
                Arg::I64(ts as i64),
                Arg::Local(2 * ts * ts * dt.size_bytes()),
            ],
        )?;
        if let Some(partial) = partial {
            // The chunks' partial products in chunk order.
            let sum = self.sum_orq(dt, &partial, 1, splits, out.len)?;
            return Ok(self.wrap(sum, shape, dt));
        }
        Ok(self.wrap(out, shape, dt))
    }

    fn arg_reduce_axis(&self, ext: Extremum, x: &GpuTensor<R>, axis: usize) -> Result<(GpuTensor<R>, GpuIndex<R>)> {
        let (o, r, q) = shape::axis_view("arg_reduce_axis", &x.shape, axis)?;
        if r == 0 {
            return Err(OpError::Shape { op: "arg_reduce_axis", detail: format!("empty axis {axis}") });
        }
        let dt = x.dtype;
        let mut shape = x.shape.clone();
        shape[axis] = 1;
        let (vals, shape) = self.new_tensor(shape, dt)?;
        let pos = self.alloc(o * q, 8)?;
        let is_max = i32::from(ext == Extremum::Max);
        let (rb, blocks) = axis_blocks(o, r, q);
        let args = |vals: &Buf<R>, pos: &Buf<R>, src: &Buf<R>, in_pos: Option<&Buf<R>>, r: usize, rb: usize, blocks| {
            self.launch(
                dt,
                ADD,
                "arg_axis",
                o * blocks * q,
                &[
                    Arg::Buf(vals),
                    Arg::Buf(pos),
                    Arg::Buf(src),
                    // Unread without positions: the source stands in.
                    Arg::Buf(in_pos.unwrap_or(src)),
                    Arg::I64(o as i64),
                    Arg::I64(r as i64),
                    Arg::I64(q as i64),
                    Arg::I64(rb as i64),
                    Arg::I64(blocks as i64),
                    Arg::I32(is_max),
                    Arg::I32(i32::from(in_pos.is_some())),
                ],
            )
        };
        if blocks == 1 {
            args(&vals, &pos, &x.buf, None, r, rb, 1)?;
        } else {
            // The blocks' winners, then the winner among them in block order (ties to the
            // earlier block, so to the lowest position, as in one pass).
            let (bv, bp) = (self.alloc(o * blocks * q, dt.size_bytes())?, self.alloc(o * blocks * q, 8)?);
            args(&bv, &bp, &x.buf, None, r, rb, blocks)?;
            args(&vals, &pos, &bv, Some(&bp), blocks, blocks, 1)?;
        }
        let last = x.buf.len as i64 - 1;
        Ok((self.wrap(vals, shape, dt), self.wrap_index_within(pos, 0, last)))
    }
}
