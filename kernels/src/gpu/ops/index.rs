//! The kernel device's gathers, scatters, stable sorts and stacking: [`IndexOps`] for
//! [`KernelDevice`], each op one or a few launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> IndexOps for KernelDevice<R> {
    fn stack(&self, parts: &[GpuTensor<R>]) -> Result<GpuTensor<R>> {
        let shape = shape::stack_shape(parts.iter().map(|p| &p.shape[..]))?;
        let dt = parts[0].dtype;
        for p in &parts[1..] {
            same_dtype("stack", &parts[0], p)?;
        }
        let m = parts[0].buf.len;
        let (out, shape) = self.new_tensor(shape, dt)?;
        for (j, p) in parts.iter().enumerate() {
            self.copy_range(dt, &out, j * m, &p.buf, 0, m)?;
        }
        Ok(self.wrap(out, shape, dt))
    }

    fn unstack(&self, x: &GpuTensor<R>) -> Result<Vec<GpuTensor<R>>> {
        let (n, row) = shape::unstack_shape(&x.shape)?;
        let m: usize = row.iter().product();
        (0..n)
            .map(|j| {
                let (out, shape) = self.new_tensor(row.clone(), x.dtype)?;
                self.copy_range(x.dtype, &out, 0, &x.buf, j * m, m)?;
                Ok(self.wrap(out, shape, x.dtype))
            })
            .collect()
    }

    fn gather(&self, src: &GpuTensor<R>, idx: &GpuIndex<R>, oob: OutOfRange) -> Result<GpuTensor<R>> {
        let dt = src.dtype;
        let n = idx.buf.len;
        let len = src.buf.len;
        let (out, shape) = self.new_tensor(vec![n], dt)?;
        let fill = match oob {
            OutOfRange::Fill(v) => v,
            OutOfRange::Error => 0.0,
        };
        // Rejecting out-of-range indices takes a device-side check and reading its verdict
        // back, unless the index tensor's range is known to fit.
        let fits = idx.bounds.is_some_and(|(lo, hi)| lo >= 0 && hi < len as i64);
        let check = oob == OutOfRange::Error && !fits;
        let bad = if check {
            let b = self.alloc(1, 8)?;
            self.fill_index_raw(&b, i64::MAX, dt)?;
            Some(b)
        } else {
            None
        };
        self.launch(
            (dt, idx.dtype),
            ADD,
            "gather",
            n,
            &[
                Arg::Buf(&out),
                Arg::Buf(&src.buf),
                Arg::Buf(&idx.buf),
                Arg::I64(n as i64),
                Arg::I64(len as i64),
                Arg::Val(fill, dt),
                // Unwritten without the check: the output stands in.
                Arg::Buf(bad.as_ref().unwrap_or(&out)),
                Arg::I32(i32::from(check)),
            ],
        )?;
        if let Some(bad) = bad {
            let position = self.download::<i64>(&bad)?[0];
            if position != i64::MAX {
                let index = match idx.dtype {
                    IndexDType::I32 => i64::from(self.download::<i32>(&idx.buf)?[position as usize]),
                    IndexDType::I64 => self.download::<i64>(&idx.buf)?[position as usize],
                };
                return Err(OpError::IndexOutOfRange { op: "gather", index, position: position as usize, len });
            }
        }
        Ok(self.wrap(out, shape, dt))
    }

    fn scatter(&self, dest: &GpuTensor<R>, idx: &GpuIndex<R>, vals: &GpuTensor<R>) -> Result<GpuTensor<R>> {
        let dt = same_dtype("scatter", dest, vals)?;
        same_len("scatter", "indices vs values", idx.buf.len, vals.buf.len)?;
        let (k, n) = (dest.buf.len, idx.buf.len);
        let out = self.copy_of(dest)?;
        let win = self.alloc(k, 8)?;
        self.fill_index_raw(&win, -1, dt)?;
        self.launch(
            (dt, idx.dtype),
            ADD,
            "scatter_winner",
            n,
            &[Arg::Buf(&win), Arg::Buf(&idx.buf), Arg::I64(n as i64), Arg::I64(k as i64)],
        )?;
        self.launch(
            (dt, idx.dtype),
            ADD,
            "scatter_apply",
            k,
            &[Arg::Buf(&out), Arg::Buf(&vals.buf), Arg::Buf(&win), Arg::I64(k as i64)],
        )?;
        Ok(self.wrap(out, dest.shape.clone(), dt))
    }

    fn sort_by_key(&self, keys: &GpuIndex<R>, num_keys: usize) -> Result<GpuIndex<R>> {
        let last = keys.buf.len as i64 - 1;
        Ok(self.wrap_index_within(self.radix_sort(keys, num_keys, false)?.0, 0, last))
    }

    fn sort_by_key_ranked(&self, keys: &GpuIndex<R>, num_keys: usize) -> Result<(GpuIndex<R>, GpuIndex<R>)> {
        let last = keys.buf.len as i64 - 1;
        match self.radix_sort(keys, num_keys, true)? {
            (perm, Some(ranks)) => Ok((self.wrap_index_within(perm, 0, last), self.wrap_index_within(ranks, 0, last))),
            (_, None) => Err(OpError::Device("sort_by_key_ranked: the radix sort returned no ranks".into())),
        }
    }

    /// The result has `src`'s index dtype; the kernel reads both in one type, so an `idx` of
    /// the other dtype is converted first.
    fn gather_index(&self, src: &GpuIndex<R>, idx: &GpuIndex<R>) -> Result<GpuIndex<R>> {
        let n = idx.buf.len;
        let dtype = src.dtype;
        let ix = self.index_buf_as(idx, dtype)?;
        let out = self.alloc(n, dtype.size_bytes())?;
        self.launch(
            (DType::F32, dtype),
            ADD,
            "gather_index",
            n,
            &[Arg::Buf(&out), Arg::Buf(&src.buf), Arg::Buf(&ix), Arg::I64(n as i64), Arg::I64(src.buf.len as i64)],
        )?;
        // Entries of src, or -1 for an index outside it.
        let bounds = src.bounds.map(|(lo, hi)| (lo.min(-1), hi.max(-1)));
        Ok(GpuIndex { buf: Arc::new(out), dtype, bounds })
    }
}
