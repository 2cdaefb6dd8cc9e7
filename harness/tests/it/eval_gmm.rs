//! `adgauge eval gmm` end to end on ADBench's own `gmm/test.txt` (skipped with the reason when the
//! ADBench folder is absent, a failure when `ADGAUGE_REQUIRE` lists `adbench`): both variants'
//! objectives and gradients (reverse and forward mode) against the hand-derived reference, and
//! GradBench's split gradient layout.

use crate::common;

use adgauge_datasets::gmm::{GmmInput, icf_size};
use adgauge_testkit::adbench_file;
use adgauge_workloads::gmm::{GmmVariant, manual_variant};

use common::{adgauge, close, json, numbers};

#[test]
fn eval_gmm_both_variants_agree_with_the_manual_gradient() {
    let Some(path) = adbench_file("gmm/test.txt") else { return };
    let p = path.to_str().unwrap();
    let g = GmmInput::read(&path, None).unwrap();
    let (d, k) = (g.d, g.k);
    let (f_ab, grad_ab) = manual_variant::<f64>(&g, GmmVariant::Adbench);
    let (f_gb, grad_gb) = manual_variant::<f64>(&g, GmmVariant::GradBench);
    assert!((f_ab - f_gb).abs() > 1e-3, "the variants must differ on this file: {f_ab} vs {f_gb}");
    for mode in ["vjp", "jvp"] {
        let v = json(&adgauge(&["eval", "gmm", "--input", p, "--mode", mode]));
        assert!(close(v["objective"].as_f64().unwrap(), f_ab, 1e-12), "{v}");
        let got = numbers(&v["gradient"]);
        assert_eq!(got.len(), grad_ab.len());
        assert!(got.iter().zip(&grad_ab).all(|(a, b)| close(*a, *b, 1e-10)), "{mode}: {got:?} vs {grad_ab:?}");

        let v = json(&adgauge(&["eval", "gmm", "--input", p, "--mode", mode, "--gmm-variant", "gradbench"]));
        assert!(close(v["objective"].as_f64().unwrap(), f_gb, 1e-12), "{v}");
        let gr = &v["gradient"];
        let (alpha, mu, q, l) = (numbers(&gr["alpha"]), &gr["mu"], &gr["q"], &gr["l"]);
        assert_eq!(alpha.len(), k);
        assert_eq!(mu.as_array().unwrap().len(), k);
        assert!(mu.as_array().unwrap().iter().all(|r| r.as_array().unwrap().len() == d));
        assert!(l.as_array().unwrap().iter().all(|r| r.as_array().unwrap().len() == d * (d - 1) / 2));
        // Reassemble ADBench's layout [alphas, means, icf_k = (q_k, l_k)] and compare.
        let (q, l) = (numbers(q), numbers(l));
        let mut flat = alpha;
        flat.extend(numbers(mu));
        let lz = icf_size(d) - d;
        for kk in 0..k {
            flat.extend(&q[kk * d..(kk + 1) * d]);
            flat.extend(&l[kk * lz..(kk + 1) * lz]);
        }
        assert!(flat.iter().zip(&grad_gb).all(|(a, b)| close(*a, *b, 1e-10)), "{mode}: {flat:?} vs {grad_gb:?}");
    }
    let bad = adgauge(&["eval", "gmm", "--input", p, "--gmm-variant", "futhark"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("futhark"));
}
