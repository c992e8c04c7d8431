// Everything of memcomm's allocator engine in one include.
#pragma once

#include "memcomm/allocator/caching_allocator.hpp"
#include "memcomm/allocator/config.hpp"
#include "memcomm/allocator/memory_source.hpp"
#include "memcomm/allocator/observer.hpp"
#include "memcomm/allocator/stats.hpp"
#include "memcomm/allocator/stream.hpp"
