#!/usr/bin/perl
# A Perl workload for programs.sh: hashes, regexes, sort, string building.
use strict;
use warnings;

my %words;
for my $i (0 .. 99999) {
    my $key = sprintf("k%05d-%s", $i % 20000, "x" x ($i % 13));
    $words{$key} .= chr(65 + $i % 26);
}
printf "keys %d\n", scalar keys %words;
my $total = 0;
$total += length $words{$_} for keys %words;
print "total length $total\n";

my @sorted = sort { length($words{$b}) <=> length($words{$a}) or $a cmp $b } keys %words;
print "first @sorted[0..2]\n";

my $text = join ",", map { "item$_=" . ($_ * 7 % 1000) } 0 .. 49999;
my @matches = ($text =~ /item(\d*7)=(\d+)/g);
printf "matches %d\n", scalar @matches;
(my $copy = $text) =~ s/item(\d+)=(\d+)/$2:$1/g;
printf "substituted length %d, starts %s\n", length $copy, substr($copy, 0, 30);

my %histogram;
$histogram{ length $_ }++ for split /,/, $copy;
print join(" ", map { "$_:$histogram{$_}" } sort { $a <=> $b } keys %histogram), "\n";

my @records = map { { id => $_, name => "n$_", list => [ (1) x ($_ % 20) ] } } 1 .. 30000;
my $sum = 0;
$sum += scalar @{ $_->{list} } for @records;
print "records sum $sum\n";
