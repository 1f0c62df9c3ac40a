package main

import "testing"

func TestMedianOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{9, 1, 5}, 5},
		{[]float64{4, 1, 3, 2}, 2.5},
		{[]float64{10, 20}, 15},
	} {
		in := append([]float64(nil), tc.in...)
		if got := medianOf(tc.in); got != tc.want {
			t.Errorf("medianOf(%v) = %v, want %v", in, got, tc.want)
		}
		for i := range in {
			if tc.in[i] != in[i] {
				t.Fatalf("medianOf reordered its argument: %v", tc.in)
			}
		}
	}
}
