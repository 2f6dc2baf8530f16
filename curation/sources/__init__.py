"""Where documents come from: WARC/WET files, Common Crawl listings, the built-in sample snapshot."""
