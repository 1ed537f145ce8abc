package main

import "context"

// morePaths are the transports beside mpqemu.
func (b *bench) morePaths(ctx context.Context) ([]accessPath, error) { return nil, nil }
