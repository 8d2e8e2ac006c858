"""How small the streams' tests write the built-ins' data: 3 JPEGs a tar shard, 32 texts a parquet file."""

IMAGES, SHARDS, TEXTS = 48, 16, 512
