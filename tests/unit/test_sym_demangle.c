/* The demangler wrapper: C++ and both Rust manglings (inputs as rustc and g++ emit them). */
#include "../test.h"
#include "symbol/demangle.h"

TEST(sym_demangle_cxx_and_rust)
{
	struct strpool p = {0};

	ASSERT_STR_EQ(sonde__sym_demangle(&p, "_ZN10sonde_test6Widget4frobEi"),
		      "sonde_test::Widget::frob(int)");
	ASSERT_STR_EQ(sonde__sym_demangle(&p, "_ZN10sonde_test5twiceIiEET_S1_"),
		      "int sonde_test::twice<int>(int)");
	/* Rust legacy: C++-like, with a hash the demangler drops */
	ASSERT_STR_EQ(sonde__sym_demangle(&p, "_ZN1r3geo1P4area17h82098de04c9d05a7E"), "r::geo::P::area");
	/* Rust v0 */
	ASSERT_STR_EQ(sonde__sym_demangle(&p, "_RNvMNtCs6GmmlP4bgsG_1r3geoNtB2_1P4area"),
		      "<r::geo::P>::area");
	/* C names and garbage come back unchanged (the same pointer) */
	const char *c = "compute_hot", *bad = "_Zgarbage", *r = "_R";
	ASSERT(sonde__sym_demangle(&p, c) == c);
	ASSERT(sonde__sym_demangle(&p, bad) == bad);
	ASSERT(sonde__sym_demangle(&p, r) == r);
	ASSERT(sonde__sym_demangle(&p, NULL) == NULL);
	sonde__strpool_free(&p);
}
