"""Numbers over seeds for every bench report: statistics (mean, std, paired t), tables, merging benches."""
