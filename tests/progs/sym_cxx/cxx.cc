// A C++ target for the symbolizer's demangling tests: a member function in a namespace
// and a function template instance.
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace sonde_test {

class Widget {
      public:
	explicit Widget(uint64_t seed) : state_(seed) {}
	__attribute__((noinline)) uint64_t frob(int rounds);

      private:
	uint64_t state_;
};

uint64_t Widget::frob(int rounds)
{
	for (int i = 0; i < rounds; i++)
		state_ = state_ * 2862933555777941757ULL + 3037000493ULL;
	return state_;
}

template <typename T> __attribute__((noinline)) T twice(T v)
{
	return v + v;
}

} // namespace sonde_test

int main(int argc, char **argv)
{
	sonde_test::Widget w(argc > 1 ? strtoull(argv[1], nullptr, 0) : 7);
	uint64_t r = w.frob(1000);
	std::printf("%llu %d\n", (unsigned long long)r, sonde_test::twice<int>(argc));
	return 0;
}
