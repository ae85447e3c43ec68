"""Range streams: the records of a partition between two offsets or timestamps, across both tiers."""
