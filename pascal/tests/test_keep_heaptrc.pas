{ test_keep_heaptrc — built with -gh: heaptrc is installed before every
  unit, and ShoalMM keeps it for its leak report, with one line on stderr.
  fpc-options: -gh }
program test_keep_heaptrc;

{$mode objfpc}{$H+}

uses
  ShoalMM, {$ifdef unix} cthreads, {$endif} SysUtils, Classes;

{$i check.inc}

var
  L: TStringList;
  i: Integer;
begin
  Check(not ShoalActive, 'ShoalMM replaced heaptrc');
  L := TStringList.Create;
  for i := 1 to 1000 do
    L.Add(IntToStr(i));
  Check(L[999] = '1000', 'a TStringList under heaptrc is corrupted');
  L.Free;
  Writeln('ok ', ChecksRun, ' checks');
end.
