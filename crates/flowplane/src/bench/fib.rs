//! `flowplane bench fib` (being written).

use super::CommonOpts;
use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct FibArgs {
    #[command(flatten)]
    pub common: CommonOpts,
}

impl FibArgs {
    pub fn demo() -> Self {
        FibArgs {
            common: CommonOpts {
                quick: true,
                ..Default::default()
            },
        }
    }
}

pub fn run(_a: FibArgs) -> Result<()> {
    Ok(())
}
