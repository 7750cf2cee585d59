//! The short form of the load and fault suite: 200 watches, 1,000 flood
//! connections. Figures are printed (`--nocapture`); only behaviour is asserted.

#[test]
fn load_and_faults_short() {
    let f = kube_api_rewriter_load::run(&kube_api_rewriter_load::Settings::short())
        .unwrap_or_else(|e| panic!("{e:#}"));
    println!("{f}");
}
