//! The kernel device's tensor creation, read-back and layout: [`TensorOps`] for [`KernelDevice`],
//! each op one or a few launches of the shared kernel source.

use crate::gpu::*;

impl<R: KernelRuntime> TensorOps for KernelDevice<R> {
    type T = GpuTensor<R>;
    type I = GpuIndex<R>;

    fn engine_name(&self) -> String {
        R::ENGINE.into()
    }
    fn carries_derivatives(&self) -> bool {
        false
    }

    fn tensor(&self, data: &[f64], shape: &[usize], dtype: DType) -> Result<GpuTensor<R>> {
        let n: usize = shape.iter().product();
        same_len("tensor", "data length vs shape", data.len(), n)?;
        self.rt.check_dtype(dtype)?;
        let b = match dtype {
            DType::F32 => self.upload(&data.iter().map(|&x| x as f32).collect::<Vec<f32>>())?,
            DType::F64 => self.upload(data)?,
        };
        Ok(self.wrap(b, shape.to_vec(), dtype))
    }

    fn full(&self, shape: &[usize], value: f64, dtype: DType) -> Result<GpuTensor<R>> {
        let (out, shape) = self.new_tensor(shape.to_vec(), dtype)?;
        self.fill_raw(&out, value, dtype)?;
        Ok(self.wrap(out, shape, dtype))
    }

    fn index_as(&self, data: &[i64], dtype: IndexDType) -> Result<GpuIndex<R>> {
        dtype.check(data)?;
        // The data is on the host here, so its range costs one pass and saves gathers their
        // read-back check (an empty index is within any range).
        let (lo, hi) = data.iter().fold((i64::MAX, i64::MIN), |(lo, hi), &v| (lo.min(v), hi.max(v)));
        let buf = match dtype {
            IndexDType::I32 => self.upload(&data.iter().map(|&v| v as i32).collect::<Vec<i32>>())?,
            IndexDType::I64 => self.upload(data)?,
        };
        Ok(GpuIndex { buf: Arc::new(buf), dtype, bounds: Some((lo, hi)) })
    }

    fn to_vec(&self, t: &GpuTensor<R>) -> Result<Vec<f64>> {
        match t.dtype {
            DType::F32 => Ok(self.download::<f32>(&t.buf)?.into_iter().map(f64::from).collect()),
            DType::F64 => self.download::<f64>(&t.buf),
        }
    }

    fn index_to_vec(&self, i: &GpuIndex<R>) -> Result<Vec<i64>> {
        match i.dtype {
            IndexDType::I32 => Ok(self.download::<i32>(&i.buf)?.into_iter().map(i64::from).collect()),
            IndexDType::I64 => self.download::<i64>(&i.buf),
        }
    }

    fn reshape(&self, t: &GpuTensor<R>, shape: &[usize]) -> Result<GpuTensor<R>> {
        same_len("reshape", "element count", t.numel(), shape.iter().product())?;
        Ok(GpuTensor { buf: t.buf.clone(), shape: shape.to_vec(), dtype: t.dtype })
    }
}
