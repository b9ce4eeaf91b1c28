//! `flowplane bench maglev` (not built yet: owned by the issue that builds the crate).

use super::CommonOpts;
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct MaglevArgs {
    #[command(flatten)]
    pub common: CommonOpts,
}

pub fn run(_a: MaglevArgs) -> Result<()> {
    anyhow::bail!("flowplane bench maglev is not built yet")
}
