{ test_keep_cmem — cmem listed before ShoalMM: ShoalMM keeps it, says so in
  one line on stderr (run_tests.sh checks the line), and the program works.
  Every test named test_keep_* must print a "ShoalMM:" line on stderr. }
program test_keep_cmem;

{$mode objfpc}{$H+}

uses
  cmem, ShoalMM, {$ifdef unix} cthreads, {$endif} SysUtils, Classes;

{$i check.inc}

var
  L: TStringList;
  i: Integer;
begin
  Check(not ShoalActive, 'ShoalMM replaced cmem');
  Check(IsMemoryManagerSet, 'no memory manager set');
  L := TStringList.Create;
  for i := 1 to 1000 do
    L.Add(IntToStr(i));
  Check(L[999] = '1000', 'a TStringList under cmem is corrupted');
  L.Free;
  Writeln('ok ', ChecksRun, ' checks');
end.
