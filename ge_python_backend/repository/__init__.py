"""Model repositories: config.pbtxt through Triton's schema, templates, generate and check."""
