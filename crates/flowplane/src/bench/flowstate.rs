//! `flowplane bench flowstate` (not built yet: owned by the issue that builds the crate).

use super::CommonOpts;
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct FlowstateArgs {
    #[command(flatten)]
    pub common: CommonOpts,
}

pub fn run(_a: FlowstateArgs) -> Result<()> {
    anyhow::bail!("flowplane bench flowstate is not built yet")
}
