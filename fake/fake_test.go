package fake_test

import (
	"testing"

	"github.com/kvoffload/kvoffload"
	"github.com/kvoffload/kvoffload/fake"
	"github.com/kvoffload/kvoffload/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(*testing.T) kvoffload.Store { return fake.New(fake.Options{}) })
}
